package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	cliflag "k8s.io/component-base/cli/flag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedulerappconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/fleetlet/fleetlet/pkg/target/candidate"
	"github.com/fleetlet/fleetlet/pkg/version"
)

// schedulerOptions are the settings of `fleetlet scheduler`: fleetlet's own
// flags, and kube-scheduler's (upstream) with their defaults.
type schedulerOptions struct {
	kubeconfig    string
	namespace     string
	permitTimeout time.Duration

	upstream *options.Options
	flags    cliflag.NamedFlagSets
}

// fleetletFlagSet is the name of the section of fleetlet's own flags in
// `fleetlet scheduler --help`, before kube-scheduler's.
const fleetletFlagSet = "fleetlet"

func newSchedulerOptions() *schedulerOptions {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "fleetlet-system"
	}
	o := &schedulerOptions{
		namespace:     ns,
		permitTimeout: candidate.DefaultPermitTimeout,
		upstream:      options.NewOptions(),
	}

	fs := o.flags.FlagSet(fleetletFlagSet)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: in-cluster); given with --config, it replaces clientConnection.kubeconfig")
	fs.StringVar(&o.namespace, "namespace", o.namespace, "namespace of the leader election Lease (default $POD_NAMESPACE, else fleetlet-system); given with --config, it replaces leaderElection.resourceNamespace")
	fs.DurationVar(&o.permitTimeout, "permit-timeout", o.permitTimeout, fmt.Sprintf("how long a reserved candidate waits at Permit for the source's election, at most %s; given with --config, it replaces the %s plugin's permitTimeout", candidate.MaxPermitTimeout, candidate.Name))

	// kube-scheduler's flags, in its sections, except its deprecated
	// --kubeconfig, which fleetlet's replaces. Defaults that differ in
	// the candidate scheduler are shown as such.
	for _, name := range o.upstream.Flags.Order {
		o.upstream.Flags.FlagSet(name).VisitAll(func(f *pflag.Flag) {
			if f.Name == "kubeconfig" {
				return
			}
			o.flags.FlagSet(name).AddFlag(f)
		})
	}
	if f := o.flags.FlagSet("leader election").Lookup("leader-elect-resource-name"); f != nil {
		_ = f.Value.Set(candidate.DefaultLeaseName)
		f.DefValue = candidate.DefaultLeaseName
	}
	if f := o.flags.FlagSet("leader election").Lookup("leader-elect-resource-namespace"); f != nil {
		f.Usage = "The namespace of the leader election Lease; overrides --namespace."
		f.DefValue = ""
		_ = f.Value.Set("")
	}
	if f := o.flags.FlagSet("misc").Lookup("write-config-to"); f != nil {
		f.Usage = "If set, write the configuration the scheduler would run (the default one, or --config, with the flags given applied) to this file and exit."
	}
	return o
}

// newSchedulerCommand returns `fleetlet scheduler`, the candidate scheduler.
func newSchedulerCommand() *cobra.Command {
	return newSchedulerOptions().command()
}

func (o *schedulerOptions) command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the candidate scheduler: kube-scheduler with every default plugin and fleetlet's candidate plugin, for pods of scheduler fleetlet-candidate",
		Long: `Run the candidate scheduler of a target cluster.

It is kube-scheduler (the upstream scheduling framework, every default plugin)
plus fleetlet's candidate plugin, in a profile named fleetlet-candidate: the
scheduler name of the candidate pods fleetlet creates for each PodChaperon.
The plugin writes each candidate's node on its chaperon
(multicluster.fleetlet.io/reserved) and holds the candidate at Permit until
the source cluster elects it (multicluster.fleetlet.io/elected) or deletes
its chaperon.

Without --config it runs a default configuration (see --write-config-to) with
its own leader election Lease, ` + candidate.DefaultLeaseName + `, in --namespace.
With --config the file may hold more profiles, but must have the
fleetlet-candidate profile with the candidate plugin enabled; fleetlet's
flags and kube-scheduler's leader election flags, when given, override it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runScheduler(runContext(cmd), cmd, o)
		},
	}
	fs := cmd.Flags()
	for _, name := range o.flags.Order {
		fs.AddFlagSet(o.flags.FlagSet(name))
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, o.flags, cols)
	return cmd
}

// configuration returns the scheduler configuration to run: --config, or
// the default one, with the fleetlet flags that were given applied.
func (o *schedulerOptions) configuration(changed func(name string) bool) (*schedulerconfig.KubeSchedulerConfiguration, error) {
	if o.permitTimeout <= 0 || o.permitTimeout > candidate.MaxPermitTimeout {
		return nil, fmt.Errorf("--permit-timeout %s must be positive and at most %s, the scheduling framework's cap", o.permitTimeout, candidate.MaxPermitTimeout)
	}
	var (
		cfg *schedulerconfig.KubeSchedulerConfiguration
		err error
	)
	if file := o.upstream.ConfigFile; file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading --config: %w", err)
		}
		if cfg, err = candidate.LoadConfiguration(data); err != nil {
			return nil, fmt.Errorf("decoding --config %s: %w", file, err)
		}
		if changed("kubeconfig") {
			cfg.ClientConnection.Kubeconfig = o.kubeconfig
		}
		if changed("namespace") {
			cfg.LeaderElection.ResourceNamespace = o.namespace
		}
		if changed("permit-timeout") {
			if err := candidate.SetPermitTimeout(cfg, o.permitTimeout); err != nil {
				return nil, fmt.Errorf("--permit-timeout: %w", err)
			}
		}
	} else {
		co := candidate.DefaultConfigOptions(o.namespace)
		co.Kubeconfig = o.kubeconfig
		co.PermitTimeout = o.permitTimeout
		co.QPS, co.Burst = o.upstream.Deprecated.QPS, o.upstream.Deprecated.Burst
		le := o.upstream.LeaderElection
		co.LeaderElect = le.LeaderElect
		co.LeaseDuration, co.RenewDeadline, co.RetryPeriod = le.LeaseDuration.Duration, le.RenewDeadline.Duration, le.RetryPeriod.Duration
		co.LeaseName = le.ResourceName
		v1cfg, err := candidate.Configuration(co)
		if err != nil {
			return nil, err
		}
		data, err := candidate.EncodeConfiguration(v1cfg)
		if err != nil {
			return nil, err
		}
		if cfg, err = candidate.LoadConfiguration(data); err != nil {
			return nil, fmt.Errorf("the default configuration: %w", err)
		}
	}
	// kube-scheduler's own leader election flags, when given.
	o.upstream.ApplyLeaderElectionTo(cfg)
	if err = errors.Join(candidate.CheckConfiguration(cfg), checkLease(cfg)); err != nil {
		return nil, err
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkLease refuses kube-scheduler's own Lease: two schedulers sharing it
// would take turns, and the cluster's pods would wait for ours.
func checkLease(cfg *schedulerconfig.KubeSchedulerConfiguration) error {
	le := cfg.LeaderElection
	if le.LeaderElect && le.ResourceName == "kube-scheduler" && le.ResourceNamespace == "kube-system" {
		return errors.New("leaderElection: the Lease kube-system/kube-scheduler belongs to the cluster's kube-scheduler; " +
			"give the candidate scheduler its own (leaderElection.resourceName, --leader-elect-resource-name)")
	}
	return nil
}

func runScheduler(ctx context.Context, cmd *cobra.Command, o *schedulerOptions) error {
	up := o.upstream
	// Feature gates, then logging, as kube-scheduler does.
	if err := up.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	fg := up.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := applyCandidateFeatureDefaults(cmd.Flags(), fg); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(up.Logs, fg); err != nil {
		return err
	}
	cliflag.PrintFlags(cmd.Flags())
	klog.InfoS("fleetlet scheduler", version.Get().KeysAndValues()...)

	cfg, err := o.configuration(cmd.Flags().Changed)
	if err != nil {
		return err
	}
	if up.WriteConfigTo != "" {
		return writeSchedulerConfig(up.WriteConfigTo, cfg)
	}

	cc, sched, err := setupScheduler(ctx, up, cfg)
	if err != nil {
		return err
	}
	if mfg, ok := fg.(featuregate.MutableFeatureGate); ok {
		mfg.AddMetrics()
	}
	up.ComponentGlobalsRegistry.AddMetrics()
	serveSchedulerClientMetrics()
	return app.Run(ctx, cc, sched)
}

// applyCandidateFeatureDefaults turns off, in the candidate scheduler, the
// kube-scheduler feature gates candidate.SchedulerFeatureDefaults lists,
// unless --feature-gates names them.
func applyCandidateFeatureDefaults(fs *pflag.FlagSet, fg featuregate.FeatureGate) error {
	mfg, ok := fg.(featuregate.MutableFeatureGate)
	if !ok {
		return fmt.Errorf("the feature gate %T cannot be set", fg)
	}
	given := ""
	if f := fs.Lookup("feature-gates"); f != nil && f.Changed {
		given = f.Value.String()
	}
	return candidate.ApplySchedulerFeatureDefaults(mfg, given)
}

// setupScheduler is kube-scheduler's app.Setup with the configuration given
// instead of one read from --config, and the candidate plugin registered.
func setupScheduler(ctx context.Context, opts *options.Options, cfg *schedulerconfig.KubeSchedulerConfiguration) (*schedulerappconfig.CompletedConfig, *scheduler.Scheduler, error) {
	opts.ComponentConfig = cfg
	opts.ConfigFile = "" // cfg is the configuration, already read
	opts.WriteConfigTo = ""
	if opts.InformerName == nil {
		if name, err := cache.NewInformerName(candidate.DefaultLeaseName); err == nil {
			opts.InformerName = name
		}
	}
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, nil, utilerrors.NewAggregate(errs)
	}
	c, err := opts.Config(ctx)
	if err != nil {
		return nil, nil, err
	}
	cc := c.Complete()

	registry := frameworkruntime.Registry{}
	if err := app.WithPlugin(candidate.Name, candidate.New)(registry); err != nil {
		return nil, nil, err
	}
	var completedProfiles []schedulerconfig.KubeSchedulerProfile
	sched, err := scheduler.New(ctx,
		cc.Client,
		cc.InformerFactory,
		cc.DynInformerFactory,
		func(name string) events.EventRecorderLogger { return cc.EventBroadcaster.NewRecorder(name) },
		scheduler.WithComponentConfigVersion(cc.ComponentConfig.APIVersion),
		scheduler.WithKubeConfig(cc.KubeConfig),
		scheduler.WithProfiles(cc.ComponentConfig.Profiles...),
		scheduler.WithPercentageOfNodesToScore(cc.ComponentConfig.PercentageOfNodesToScore),
		scheduler.WithFrameworkOutOfTreeRegistry(registry),
		scheduler.WithPodMaxBackoffSeconds(cc.ComponentConfig.PodMaxBackoffSeconds),
		scheduler.WithPodInitialBackoffSeconds(cc.ComponentConfig.PodInitialBackoffSeconds),
		scheduler.WithPodMaxInUnschedulablePodsDuration(cc.PodMaxInUnschedulablePodsDuration),
		scheduler.WithExtenders(cc.ComponentConfig.Extenders...),
		scheduler.WithParallelism(cc.ComponentConfig.Parallelism),
		scheduler.WithBuildFrameworkCapturer(func(p schedulerconfig.KubeSchedulerProfile) {
			completedProfiles = append(completedProfiles, p)
		}),
	)
	if err != nil {
		return nil, nil, err
	}
	candidate.QuietLosses(sched)
	if err := options.LogOrWriteConfig(klog.FromContext(ctx), "", &cc.ComponentConfig, completedProfiles); err != nil {
		return nil, nil, err
	}
	return &cc, sched, nil
}

// writeSchedulerConfig writes the configuration as a v1 file.
func writeSchedulerConfig(file string, cfg *schedulerconfig.KubeSchedulerConfiguration) error {
	info, ok := runtime.SerializerInfoForMediaType(schedulerscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeYAML)
	if !ok {
		return errors.New("no YAML encoder for the scheduler configuration")
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	encoder := schedulerscheme.Codecs.EncoderForVersion(info.Serializer, configv1.SchemeGroupVersion)
	if err := encoder.Encode(cfg, f); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing the configuration: %w", err)
	}
	return f.Close()
}
