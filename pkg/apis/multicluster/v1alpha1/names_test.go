package v1alpha1_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// TestNames checks that every fleetlet name is valid where Kubernetes uses it,
// and that the ones in docs/design.md's "Names" table are spelled as written there.
func TestNames(t *testing.T) {
	qualified := map[string]struct {
		got, want string
	}{
		"LabelEnabled":                  {v1alpha1.LabelEnabled, "multicluster.fleetlet.io/enabled"},
		"AnnotationElect":               {v1alpha1.AnnotationElect, "multicluster.fleetlet.io/elect"},
		"SchedulingGateElection":        {v1alpha1.SchedulingGateElection, "multicluster.fleetlet.io/election"},
		"FinalizerDelegate":             {v1alpha1.FinalizerDelegate, "multicluster.fleetlet.io/delegate"},
		"FinalizerDrain":                {v1alpha1.FinalizerDrain, "multicluster.fleetlet.io/drain"},
		"AnnotationForceDisconnect":     {v1alpha1.AnnotationForceDisconnect, "multicluster.fleetlet.io/force-disconnect"},
		"AnnotationSourceSpec":          {v1alpha1.AnnotationSourceSpec, "multicluster.fleetlet.io/source-spec"},
		"AnnotationClusterSelector":     {v1alpha1.AnnotationClusterSelector, "multicluster.fleetlet.io/cluster-selector"},
		"AnnotationFollow":              {v1alpha1.AnnotationFollow, "multicluster.fleetlet.io/follow"},
		"AnnotationGlobal":              {v1alpha1.AnnotationGlobal, "multicluster.fleetlet.io/global"},
		"ConditionElected":              {string(v1alpha1.ConditionElected), "multicluster.fleetlet.io/Elected"},
		"LabelParentUID":                {v1alpha1.LabelParentUID, "multicluster.fleetlet.io/parent-uid"},
		"LabelParentCluster":            {v1alpha1.LabelParentCluster, "multicluster.fleetlet.io/parent-cluster"},
		"AnnotationParentName":          {v1alpha1.AnnotationParentName, "multicluster.fleetlet.io/parent-name"},
		"AnnotationParentNamespace":     {v1alpha1.AnnotationParentNamespace, "multicluster.fleetlet.io/parent-namespace"},
		"AnnotationReserved":            {v1alpha1.AnnotationReserved, "multicluster.fleetlet.io/reserved"},
		"AnnotationTarget":              {v1alpha1.AnnotationTarget, "multicluster.fleetlet.io/target"},
		"AnnotationProbe":               {v1alpha1.AnnotationProbe, "multicluster.fleetlet.io/probe"},
		"LabelClaimMirror":              {v1alpha1.LabelClaimMirror, "multicluster.fleetlet.io/claim-mirror"},
		"AnnotationTargetVolume":        {v1alpha1.AnnotationTargetVolume, "multicluster.fleetlet.io/target-volume"},
		"AnnotationDevices":             {v1alpha1.AnnotationDevices, "multicluster.fleetlet.io/devices"},
		"LabelGroup":                    {v1alpha1.LabelGroup, "multicluster.fleetlet.io/group"},
		"AnnotationGroupMinMembers":     {v1alpha1.AnnotationGroupMinMembers, "multicluster.fleetlet.io/group-min-members"},
		"AnnotationEvictWithClaims":     {v1alpha1.AnnotationEvictWithClaims, "multicluster.fleetlet.io/evict-with-claims"},
		"AnnotationElected":             {v1alpha1.AnnotationElected, "multicluster.fleetlet.io/elected"},
		"AnnotationElectedAt":           {v1alpha1.AnnotationElectedAt, "multicluster.fleetlet.io/elected-at"},
		"AnnotationPreviousDelegate":    {v1alpha1.AnnotationPreviousDelegate, "multicluster.fleetlet.io/previous-delegate"},
		"AnnotationDeletionGracePeriod": {v1alpha1.AnnotationDeletionGracePeriod, "multicluster.fleetlet.io/deletion-grace-period-seconds"},
		"AnnotationRemovedLabels":       {v1alpha1.AnnotationRemovedLabels, "multicluster.fleetlet.io/removed-labels"},
		"AnnotationRemovedAnnotations":  {v1alpha1.AnnotationRemovedAnnotations, "multicluster.fleetlet.io/removed-annotations"},
		"LabelCluster":                  {v1alpha1.LabelCluster, "multicluster.fleetlet.io/cluster"},
		"LabelCreatedBySource":          {v1alpha1.LabelCreatedBySource, "multicluster.fleetlet.io/created-by-source"},
		"AnnotationTargetLabels":        {v1alpha1.AnnotationTargetLabels, "multicluster.fleetlet.io/target-labels"},
		"AnnotationTargetAnnotations":   {v1alpha1.AnnotationTargetAnnotations, "multicluster.fleetlet.io/target-annotations"},
		"LabelNodeType":                 {v1alpha1.LabelNodeType, "type"},
		"LabelNodeRole":                 {v1alpha1.LabelNodeRole, "kubernetes.io/role"},
		"LabelHostname":                 {v1alpha1.LabelHostname, "kubernetes.io/hostname"},
		"TaintKeyProvider":              {v1alpha1.TaintKeyProvider, "virtual-kubelet.io/provider"},
	}
	for name, tc := range qualified {
		t.Run(name, func(t *testing.T) {
			assert.Equalf(t, tc.want, tc.got, "%s", name)
			// Labels, annotations, finalizers, gates and condition types
			// are all qualified names.
			errs := validation.IsQualifiedName(tc.got)
			assert.Emptyf(t, errs, "%s = %q is not a qualified name: %v", name, tc.got, errs)
		})
	}

	// Prefixes must yield valid label keys for the longest names they are
	// used with.
	prefixed := map[string]string{
		"TargetLabelPrefix":   v1alpha1.TargetLabelPrefix + "topology.kubernetes.io.region",
		"DelegateLabelPrefix": v1alpha1.DelegateLabelPrefix + "app.kubernetes.io.name",
		"SourceLabelPrefix":   v1alpha1.SourceLabelPrefix + strings.Repeat("a", 63),
	}
	for name, key := range prefixed {
		t.Run(name, func(t *testing.T) {
			errs := validation.IsQualifiedName(key)
			assert.Emptyf(t, errs, "%s gives invalid label key %q: %v", name, key, errs)
		})
	}
	got, want := v1alpha1.TargetLabelPrefix, "target.multicluster.fleetlet.io/"
	assert.Equal(t, want, got, "TargetLabelPrefix")
	got, want = v1alpha1.DelegateLabelPrefix, "delegate.multicluster.fleetlet.io/"
	assert.Equal(t, want, got, "DelegateLabelPrefix")

	values := map[string]string{
		"LabelEnabledValue":      v1alpha1.LabelEnabledValue,
		"NodeTypeVirtualKubelet": v1alpha1.NodeTypeVirtualKubelet,
		"NodeRoleCluster":        v1alpha1.NodeRoleCluster,
		"TaintValueProvider":     v1alpha1.TaintValueProvider,
	}
	for name, v := range values {
		errs := validation.IsValidLabelValue(v)
		assert.Emptyf(t, errs, "%s = %q is not a valid label value: %v", name, v, errs)
	}

	for name, v := range map[string]string{
		"PriorityClassCandidate": v1alpha1.PriorityClassCandidate,
		"SchedulerNameCandidate": v1alpha1.SchedulerNameCandidate,
		"ClusterRoleSource":      v1alpha1.ClusterRoleSource,
	} {
		assert.Falsef(t, v != "fleetlet-candidate" && v != "fleetlet-source", "%s = %q, want the name docs/design.md gives", name, v)
		errs := validation.IsDNS1123Subdomain(v)
		assert.Emptyf(t, errs, "%s = %q is not a valid object name: %v", name, v, errs)
	}
	// A Source's name fits in 63 characters, so its default ServiceAccount
	// name is always a valid object name.
	sa := v1alpha1.SourceServiceAccountPrefix + strings.Repeat("a", 63)
	assert.Emptyf(t, validation.IsDNS1123Subdomain(sa), "default ServiceAccount name %q is not a valid object name", sa)

	taint := v1alpha1.VirtualNodeTaint()
	got, want = taint.ToString(), "virtual-kubelet.io/provider=fleetlet:NoSchedule"
	assert.Equal(t, want, got, "VirtualNodeTaint()")
}

func TestIsFleetletKey(t *testing.T) {
	for key, want := range map[string]bool{
		"multicluster.fleetlet.io/elected":      true,
		"delegate.multicluster.fleetlet.io/app": true,
		"source.multicluster.fleetlet.io/east":  true,
		"xmulticlusterfleetlet.io/x":            false,
		"evilmulticluster.fleetlet.io/x":        false,
		"app.kubernetes.io/name":                false,
		"multicluster.fleetlet.io":              false,
		"team":                                  false,
	} {
		got := v1alpha1.IsFleetletKey(key)
		assert.Equalf(t, want, got, "IsFleetletKey(%q)", key)
	}
}
