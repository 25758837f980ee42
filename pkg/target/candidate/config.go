package candidate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

const (
	// ProfileName is the scheduler name, and profile, of the candidate
	// scheduler: the schedulerName of every candidate pod.
	ProfileName = v1alpha1.SchedulerNameCandidate

	// DefaultLeaseName is the name of the candidate scheduler's leader
	// election Lease, distinct from the cluster's own kube-scheduler's.
	DefaultLeaseName = "fleetlet-candidate-scheduler"
)

// ConfigOptions are the settings of the candidate scheduler's default
// configuration.
type ConfigOptions struct {
	// Kubeconfig of the cluster; empty means in-cluster.
	Kubeconfig string
	// QPS and Burst of the scheduler's clients.
	QPS   float32
	Burst int32

	// LeaderElect turns leader election on, with a Lease LeaseName in
	// LeaseNamespace.
	LeaderElect    bool
	LeaseName      string
	LeaseNamespace string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration

	// PermitTimeout is the candidate plugin's permitTimeout.
	PermitTimeout time.Duration
}

// DefaultConfigOptions returns the defaults of ConfigOptions, with the
// leader election Lease in namespace.
func DefaultConfigOptions(namespace string) ConfigOptions {
	return ConfigOptions{
		QPS:            50,
		Burst:          100,
		LeaderElect:    true,
		LeaseName:      DefaultLeaseName,
		LeaseNamespace: namespace,
		LeaseDuration:  15 * time.Second,
		RenewDeadline:  10 * time.Second,
		RetryPeriod:    2 * time.Second,
		PermitTimeout:  DefaultPermitTimeout,
	}
}

// Configuration returns the candidate scheduler's configuration: one
// profile, fleetlet-candidate, with every default plugin and the candidate
// plugin enabled at every extension point it implements (multiPoint), and
// its own leader election Lease. It is what `fleetlet scheduler` runs without
// --config, and the starting point of a custom configuration.
func Configuration(o ConfigOptions) (*configv1.KubeSchedulerConfiguration, error) {
	args, err := json.Marshal(&Args{PermitTimeout: &metav1.Duration{Duration: o.PermitTimeout}})
	if err != nil {
		return nil, err
	}
	cfg := &configv1.KubeSchedulerConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: configv1.SchemeGroupVersion.String(), Kind: "KubeSchedulerConfiguration"},
		ClientConnection: componentbaseconfigv1alpha1.ClientConnectionConfiguration{
			Kubeconfig: o.Kubeconfig,
			QPS:        o.QPS,
			Burst:      o.Burst,
		},
		LeaderElection: componentbaseconfigv1alpha1.LeaderElectionConfiguration{
			LeaderElect:       ptr.To(o.LeaderElect),
			LeaseDuration:     metav1.Duration{Duration: o.LeaseDuration},
			RenewDeadline:     metav1.Duration{Duration: o.RenewDeadline},
			RetryPeriod:       metav1.Duration{Duration: o.RetryPeriod},
			ResourceLock:      "leases",
			ResourceName:      o.LeaseName,
			ResourceNamespace: o.LeaseNamespace,
		},
		Profiles: []configv1.KubeSchedulerProfile{{
			SchedulerName: ptr.To(ProfileName),
			Plugins: &configv1.Plugins{
				MultiPoint: configv1.PluginSet{Enabled: []configv1.Plugin{{Name: Name}}},
			},
			PluginConfig: []configv1.PluginConfig{{
				Name: Name,
				Args: runtime.RawExtension{Raw: args},
			}},
		}},
	}
	return cfg, nil
}

// EncodeConfiguration writes a configuration as YAML, as a --config file
// holds it.
func EncodeConfiguration(cfg *configv1.KubeSchedulerConfiguration) ([]byte, error) {
	return yaml.Marshal(cfg)
}

// LoadConfiguration reads a KubeSchedulerConfiguration file's content the way
// kube-scheduler does (defaults applied, converted to the internal type).
func LoadConfiguration(data []byte) (*config.KubeSchedulerConfiguration, error) {
	obj, gvk, err := scheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := obj.(*config.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("not a KubeSchedulerConfiguration: %s", gvk)
	}
	// As kube-scheduler's own loader does: conversion clears it.
	cfg.APIVersion = gvk.GroupVersion().String()
	return cfg, nil
}

// CheckConfiguration checks that a configuration runs the candidate
// scheduler: a profile named fleetlet-candidate with the candidate plugin
// enabled at Reserve and Permit, and valid args for it. Other profiles are
// the user's business.
func CheckConfiguration(cfg *config.KubeSchedulerConfiguration) error {
	prof := candidateProfile(cfg)
	if prof == nil {
		return fmt.Errorf("no profile with schedulerName %q: candidate pods are scheduled by that profile; "+
			"add it with the %s plugin enabled (`fleetlet scheduler --write-config-to FILE` writes the default configuration)", ProfileName, Name)
	}
	var errs []error
	for _, ext := range []struct {
		name string
		set  config.PluginSet
	}{{"reserve", prof.Plugins.Reserve}, {"permit", prof.Plugins.Permit}} {
		if !enabledAt(prof.Plugins, ext.set) {
			errs = append(errs, fmt.Errorf("profile %q: the %s plugin is not enabled at %s (enable it at multiPoint)", ProfileName, Name, ext.name))
		}
	}
	if _, err := DecodeArgs(pluginArgs(prof)); err != nil {
		errs = append(errs, fmt.Errorf("profile %q: %w", ProfileName, err))
	}
	return errors.Join(errs...)
}

// SetPermitTimeout sets the candidate plugin's permitTimeout in the
// fleetlet-candidate profile, keeping its other args.
func SetPermitTimeout(cfg *config.KubeSchedulerConfiguration, d time.Duration) error {
	prof := candidateProfile(cfg)
	if prof == nil {
		return fmt.Errorf("no profile with schedulerName %q", ProfileName)
	}
	args := &Args{}
	if u, ok := pluginArgs(prof).(*runtime.Unknown); ok && len(u.Raw) > 0 {
		if err := yaml.UnmarshalStrict(u.Raw, args); err != nil {
			return fmt.Errorf("decoding the %s plugin's args: %w", Name, err)
		}
	}
	args.PermitTimeout = &metav1.Duration{Duration: d}
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	obj := &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}
	for i := range prof.PluginConfig {
		if prof.PluginConfig[i].Name == Name {
			prof.PluginConfig[i].Args = obj
			return nil
		}
	}
	prof.PluginConfig = append(prof.PluginConfig, config.PluginConfig{Name: Name, Args: obj})
	return nil
}

func candidateProfile(cfg *config.KubeSchedulerConfiguration) *config.KubeSchedulerProfile {
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == ProfileName {
			return &cfg.Profiles[i]
		}
	}
	return nil
}

func pluginArgs(prof *config.KubeSchedulerProfile) runtime.Object {
	for _, pc := range prof.PluginConfig {
		if pc.Name == Name {
			return pc.Args
		}
	}
	return nil
}

// enabledAt tells whether the candidate plugin runs at the extension point
// whose set is given, the way the framework expands multiPoint: enabled
// there by name, or enabled at multiPoint and not disabled there.
func enabledAt(plugins *config.Plugins, set config.PluginSet) bool {
	if plugins == nil {
		return false
	}
	has := func(ps []config.Plugin, name string) bool {
		return slices.ContainsFunc(ps, func(p config.Plugin) bool { return p.Name == name })
	}
	if has(set.Enabled, Name) {
		return true
	}
	return has(plugins.MultiPoint.Enabled, Name) && !has(plugins.MultiPoint.Disabled, Name) &&
		!has(set.Disabled, Name) && !has(set.Disabled, "*")
}
