package candidate

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

const (
	// DefaultPermitTimeout is how long a candidate waits at Permit for the
	// source's election by default.
	DefaultPermitTimeout = 5 * time.Minute

	// MaxPermitTimeout is the scheduling framework's cap on a Permit wait:
	// the framework silently shortens any longer wait to it, so longer
	// values are refused rather than ignored.
	MaxPermitTimeout = 15 * time.Minute

	// DefaultAPITimeout bounds one read or write of a PodChaperon by
	// default.
	DefaultAPITimeout = 10 * time.Second

	// DefaultReservationWorkers is how many reservations are written to
	// the API server in parallel by default.
	DefaultReservationWorkers = 4
)

// Args are the arguments of the candidate plugin, given in a scheduler
// profile's pluginConfig:
//
//	pluginConfig:
//	- name: candidate
//	  args:
//	    permitTimeout: 5m
//
// Unset fields take their defaults (SetDefaults).
type Args struct {
	metav1.TypeMeta `json:",inline"`

	// PermitTimeout is how long a reserved candidate waits at Permit for
	// the source to elect it (multicluster.fleetlet.io/elected on its
	// chaperon) before the scheduler gives its node back and tries again
	// later. At most MaxPermitTimeout.
	PermitTimeout *metav1.Duration `json:"permitTimeout,omitempty"`

	// APITimeout bounds one read or write of a PodChaperon.
	APITimeout *metav1.Duration `json:"apiTimeout,omitempty"`

	// ReservationWorkers is how many reservations (and their removals) are
	// written to the API server in parallel.
	ReservationWorkers *int32 `json:"reservationWorkers,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (a *Args) DeepCopyObject() runtime.Object {
	if a == nil {
		return nil
	}
	out := &Args{TypeMeta: a.TypeMeta}
	if a.PermitTimeout != nil {
		d := *a.PermitTimeout
		out.PermitTimeout = &d
	}
	if a.APITimeout != nil {
		d := *a.APITimeout
		out.APITimeout = &d
	}
	if a.ReservationWorkers != nil {
		n := *a.ReservationWorkers
		out.ReservationWorkers = &n
	}
	return out
}

// SetDefaults fills the unset fields of args with their defaults.
func SetDefaults(args *Args) {
	if args.PermitTimeout == nil {
		args.PermitTimeout = &metav1.Duration{Duration: DefaultPermitTimeout}
	}
	if args.APITimeout == nil {
		args.APITimeout = &metav1.Duration{Duration: DefaultAPITimeout}
	}
	if args.ReservationWorkers == nil {
		n := int32(DefaultReservationWorkers)
		args.ReservationWorkers = &n
	}
}

// Validate checks defaulted args.
func Validate(args *Args) error {
	var errs []error
	switch {
	case args.PermitTimeout == nil:
		errs = append(errs, errors.New("permitTimeout: required"))
	case args.PermitTimeout.Duration <= 0:
		errs = append(errs, fmt.Errorf("permitTimeout: %s must be positive", args.PermitTimeout.Duration))
	case args.PermitTimeout.Duration > MaxPermitTimeout:
		errs = append(errs, fmt.Errorf("permitTimeout: %s is longer than %s, the scheduling framework's cap on a Permit wait", args.PermitTimeout.Duration, MaxPermitTimeout))
	}
	switch {
	case args.APITimeout == nil:
		errs = append(errs, errors.New("apiTimeout: required"))
	case args.APITimeout.Duration <= 0:
		errs = append(errs, fmt.Errorf("apiTimeout: %s must be positive", args.APITimeout.Duration))
	}
	switch {
	case args.ReservationWorkers == nil:
		errs = append(errs, errors.New("reservationWorkers: required"))
	case *args.ReservationWorkers < 1 || *args.ReservationWorkers > 64:
		errs = append(errs, fmt.Errorf("reservationWorkers: %d is not between 1 and 64", *args.ReservationWorkers))
	}
	return errors.Join(errs...)
}

// DecodeArgs turns what the scheduling framework hands a plugin factory
// (nil when the profile has no pluginConfig for the plugin, *runtime.Unknown
// holding JSON or YAML from a configuration file, or *Args when built in
// code) into defaulted, validated Args. Unknown fields are refused, so a
// misspelt setting is an error instead of being ignored.
func DecodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	switch o := obj.(type) {
	case nil:
	case *Args:
		args = o.DeepCopyObject().(*Args)
	case *runtime.Unknown:
		if len(o.Raw) > 0 {
			// JSON is YAML, so one strict decoder reads both.
			if err := yaml.UnmarshalStrict(o.Raw, args); err != nil {
				return nil, fmt.Errorf("decoding the %s plugin's args: %w", Name, err)
			}
		}
	default:
		return nil, fmt.Errorf("the %s plugin's args have type %T, want *runtime.Unknown or *candidate.Args", Name, obj)
	}
	SetDefaults(args)
	if err := Validate(args); err != nil {
		return nil, fmt.Errorf("the %s plugin's args are invalid: %w", Name, err)
	}
	return args, nil
}
