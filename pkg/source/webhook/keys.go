package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// SealPreviousPrefix starts the keys of the seal key Secret that hold
// earlier seal keys: they still open what they sealed, and seal nothing.
const SealPreviousPrefix = "previous-"

// DefaultKeyRefresh is how often the seal key Secret is read again.
const DefaultKeyRefresh = 10 * time.Second

// Keys is the seal key set: the key that seals, and the earlier keys that
// still open (so that a rotation never makes the proxies sealed before it
// untrusted).
type Keys struct {
	Seal     []byte
	Previous [][]byte
}

// openers are the keys Open tries, the sealing key first.
func (k Keys) openers() [][]byte { return append([][]byte{k.Seal}, k.Previous...) }

func (k Keys) equal(o Keys) bool {
	if !bytes.Equal(k.Seal, o.Seal) || len(k.Previous) != len(o.Previous) {
		return false
	}
	for i := range k.Previous {
		if !bytes.Equal(k.Previous[i], o.Previous[i]) {
			return false
		}
	}
	return true
}

// KeySource gives the current seal key set, or why there is none.
type KeySource interface {
	Keys() (Keys, error)
}

// StaticKeys is a fixed key set.
type StaticKeys Keys

// Keys implements KeySource.
func (s StaticKeys) Keys() (Keys, error) { return Keys(s), nil }

// ErrNoSealKey: the seal key Secret is missing or unusable. fleetlet then
// seals nothing (the webhook refuses proxy pods) rather than make a key
// the other replicas do not know.
var ErrNoSealKey = errors.New("no seal key")

// keysFromSecret reads the key set of a seal key Secret: data "key" seals,
// every "previous-*" opens too.
func keysFromSecret(s *corev1.Secret) (Keys, error) {
	k := Keys{Seal: s.Data[SealKeyDataKey]}
	if len(k.Seal) < MinKeyLength {
		return Keys{}, fmt.Errorf("%w: the Secret has no %q of at least %d bytes", ErrNoSealKey, SealKeyDataKey, MinKeyLength)
	}
	var names []string
	for name := range s.Data {
		if strings.HasPrefix(name, SealPreviousPrefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if len(s.Data[name]) < MinKeyLength {
			return Keys{}, fmt.Errorf("%w: %q is shorter than %d bytes", ErrNoSealKey, name, MinKeyLength)
		}
		k.Previous = append(k.Previous, s.Data[name])
	}
	return k, nil
}

// SecretKeys keeps the seal key set of a Secret, read again every
// interval by Start (a manager Runnable), on every replica. The Secret is the chart's: fleetlet
// never creates it, so a deleted Secret means no key (ErrNoSealKey), never
// a new key that the other replicas do not know.
type SecretKeys struct {
	reader   client.Reader
	key      types.NamespacedName
	interval time.Duration
	log      logr.Logger
	onChange func()

	mu   sync.Mutex
	keys Keys
	err  error
}

// NewSecretKeys reads the key set from Secret namespace/name through
// reader (the API, not a cache: Secrets are not cached). onChange, if not
// nil, is called when the key set changes after the first read.
func NewSecretKeys(reader client.Reader, namespace, name string, onChange func()) *SecretKeys {
	return &SecretKeys{
		reader: reader, key: types.NamespacedName{Namespace: namespace, Name: name},
		interval: DefaultKeyRefresh, log: ctrllog.Log.WithName("seal-keys"), onChange: onChange,
		err: fmt.Errorf("%w: the seal key Secret %s was not read yet", ErrNoSealKey, types.NamespacedName{Namespace: namespace, Name: name}),
	}
}

// Keys implements KeySource.
func (s *SecretKeys) Keys() (Keys, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys, s.err
}

// Load reads the Secret now. A read that fails for another reason than
// the Secret being missing keeps the last key set.
func (s *SecretKeys) Load(ctx context.Context) error {
	var secret corev1.Secret
	err := s.reader.Get(ctx, s.key, &secret)
	var keys Keys
	switch {
	case apierrors.IsNotFound(err):
		err = fmt.Errorf("%w: the seal key Secret %s is missing (the chart makes it: helm upgrade restores it)", ErrNoSealKey, s.key)
	case err != nil:
		return fmt.Errorf("reading the seal key Secret %s: %w", s.key, err)
	default:
		keys, err = keysFromSecret(&secret)
		if err != nil {
			err = fmt.Errorf("the seal key Secret %s: %w", s.key, err)
		}
	}
	s.mu.Lock()
	changed := !keys.equal(s.keys) || (err == nil) != (s.err == nil)
	s.keys, s.err = keys, err
	s.mu.Unlock()
	if changed {
		if err != nil {
			s.log.Error(err, "Proxy pods are refused until the seal key is back")
		} else {
			s.log.Info("Seal keys loaded", "previous", len(keys.Previous))
		}
		if s.onChange != nil {
			s.onChange()
		}
	}
	return err
}

// Start reads the Secret every interval until ctx ends. It runs on every
// replica (the webhook serves on each).
func (s *SecretKeys) Start(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.Load(ctx); err != nil && !errors.Is(err, ErrNoSealKey) {
				s.log.V(1).Info("Cannot read the seal key Secret; keeping the last keys", "err", err.Error())
			}
		}
	}
}

// NeedLeaderElection is false: every replica seals and opens.
func (*SecretKeys) NeedLeaderElection() bool { return false }
