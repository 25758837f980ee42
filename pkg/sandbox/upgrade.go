package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// fleetletProcesses are the components that run the fleetlet binary, in the
// order an upgrade restarts them: the candidate scheduler first, so that the
// new manager meets the new scheduler.
var fleetletProcesses = []string{ComponentScheduler, ComponentManagerStandby, ComponentManager}

// InstallFleetlet switches every cluster's fleetlet to the binary and
// packaged chart in dir, as an operator upgrades (or rolls back) a release:
// in each cluster in turn, `helm upgrade` to dir's chart, then each fleetlet
// process that runs is stopped (SIGTERM and its grace period, as a
// Deployment's rollout stops the old pod) and started again from dir's
// binary. The sandbox records dir: later restarts run the same release.
func (s *Sandbox) InstallFleetlet(ctx context.Context, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, binFleetlet)); err != nil {
		return fmt.Errorf("no fleetlet binary in %s: %w", dir, err)
	}
	if _, err := PackagedChart(dir); err != nil {
		return err
	}
	if err := s.setFleetletBinDir(dir); err != nil {
		return err
	}
	for _, name := range s.ClusterNames() {
		began := time.Now()
		if err := s.installFleetletIn(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(s.opts.Out, "%s: fleetlet from %s installed in %s\n", name, dir, time.Since(began).Round(100*time.Millisecond))
	}
	return nil
}

func (s *Sandbox) setFleetletBinDir(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.FleetletBinDir = dir
	s.state.Settings.FleetletBinDir = fleetletBinDirSetting(s.opts)
	return s.state.save()
}

// installFleetletIn upgrades one cluster's release, then restarts the
// fleetlet processes that run there.
func (s *Sandbox) installFleetletIn(ctx context.Context, name string) error {
	s.mu.Lock()
	c, err := s.state.Cluster(name)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.installFleetlet(ctx, c); err != nil {
		return err
	}
	for _, comp := range s.runningComponents(name, fleetletProcesses...) {
		if err := s.stopComponent(name, comp, s.opts.StopGracePeriod); err != nil {
			return err
		}
		if err := s.StartComponent(ctx, name, comp); err != nil {
			return err
		}
	}
	return nil
}

// runningComponents are those of names that have a live process in the
// cluster, in the order given.
func (s *Sandbox) runningComponents(cluster string, names ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.state.Cluster(cluster)
	if err != nil {
		return nil
	}
	var out []string
	for _, name := range names {
		for _, p := range c.Processes {
			if p.Component == name && p.Alive() {
				out = append(out, name)
				break
			}
		}
	}
	return out
}
