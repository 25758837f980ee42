package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/target/chaperon"
	"github.com/fleetlet/fleetlet/pkg/target/summary"
)

// setupTargetSide wires what runs because this cluster is a target: the
// ClusterSummary and Source controllers, the candidate PriorityClass and the
// ClusterRoles sources are bound to.
func setupTargetSide(ctx context.Context, mgr ctrl.Manager, o managerOptions) error {
	sr := &summary.ClusterSummaryReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}
	if o.schedulerLease != "" {
		sr.SchedulerLease = types.NamespacedName{Namespace: o.namespace, Name: o.schedulerLease}
	}
	if err := sr.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the ClusterSummary controller: %w", err)
	}
	if err := (&access.SourceReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Source controller: %w", err)
	}
	if err := (&access.ClusterSourceReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ClusterSource controller: %w", err)
	}
	if err := (&chaperon.PodChaperonReconciler{RecreateDelay: o.delegateRecreateDelay}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the chaperon controller: %w", err)
	}
	// The leader makes sure, once, that what every candidate and every
	// source needs exists: the PriorityClass and the ClusterRoles.
	// A failure is logged and retried with backoff; it never stops the
	// manager, so the source side keeps working.
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		log := ctrl.Log.WithName("setup")
		c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return err
		}
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: 5 * time.Minute}
		err = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			if err := summary.EnsurePriorityClass(ctx, c); err != nil {
				log.Error(err, "Ensuring the candidate PriorityClass; retrying")
				return false, nil
			}
			if err := access.EnsureClusterRoles(ctx, c); err != nil {
				log.Error(err, "Ensuring the source ClusterRoles; retrying")
				return false, nil
			}
			log.Info("Ensured the candidate PriorityClass and the source ClusterRoles")
			return true, nil
		})
		if ctx.Err() != nil {
			return nil // shutting down
		}
		return err
	}))
}
