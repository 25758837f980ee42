package vnode

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// OSLinux is the value of the kubernetes.io/os label and of nodeInfo's
// operatingSystem on every virtual node.
const OSLinux = "linux"

// TargetLabelKey returns the key under which a virtual node carries its
// target's shared node label key: target.multicluster.fleetlet.io/ followed
// by key with every "/" replaced by ".", so that
// topology.kubernetes.io/region becomes
// target.multicluster.fleetlet.io/topology.kubernetes.io.region. It returns
// false when the result is not a valid label key (its name part, the
// original key, is longer than 63 characters or has characters a label name
// refuses).
func TargetLabelKey(key string) (string, bool) {
	k := v1alpha1.TargetLabelPrefix + strings.ReplaceAll(key, "/", ".")
	return k, len(validation.IsQualifiedName(k)) == 0
}

// CompileExcludedLabels compiles a target's spec.excludedLabelsRegexp. The
// empty expression excludes nothing (nil, nil).
func CompileExcludedLabels(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("excludedLabelsRegexp %q does not compile: %w", expr, err)
	}
	return re, nil
}

// TargetLabels returns the labels a virtual node carries for the labels its
// target's schedulable nodes share (ClusterSummary status.labels): each key
// under TargetLabelKey, except the keys excluded matches (it is matched
// against the target's own key, such as topology.kubernetes.io/zone) and the
// keys or values that are not valid on the virtual node. When excluded does
// not compile, it returns no label at all, and the error: a target whose
// exclusions cannot be applied shows none of its labels rather than some
// its administrator meant to hide.
func TargetLabels(shared map[string]string, excluded string) (map[string]string, error) {
	re, err := CompileExcludedLabels(excluded)
	if err != nil {
		return map[string]string{}, err
	}
	out := make(map[string]string, len(shared))
	for k, v := range shared {
		if re != nil && re.MatchString(k) {
			continue
		}
		nk, ok := TargetLabelKey(k)
		if !ok || len(validation.IsValidLabelValue(v)) > 0 {
			continue
		}
		out[nk] = v
	}
	return out, nil
}

// NodeLabels returns every label fleetlet owns on the virtual node nodeName
// of the target key: the conventions (type=virtual-kubelet,
// kubernetes.io/role=cluster, kubernetes.io/hostname=<node>,
// kubernetes.io/os=linux), multicluster.fleetlet.io/cluster=<target name>
// (left out for a target name longer than a label value allows) and the
// target's shared labels (TargetLabels). The error is TargetLabels'; the
// labels returned are then the others.
func NodeLabels(nodeName string, key proxy.TargetKey, shared map[string]string, excluded string) (map[string]string, error) {
	labels, err := TargetLabels(shared, excluded)
	labels[v1alpha1.LabelNodeType] = v1alpha1.NodeTypeVirtualKubelet
	labels[v1alpha1.LabelNodeRole] = v1alpha1.NodeRoleCluster
	labels[v1alpha1.LabelHostname] = nodeName
	labels[corev1.LabelOSStable] = OSLinux
	if len(validation.IsValidLabelValue(key.Name)) == 0 {
		labels[v1alpha1.LabelCluster] = key.Name
	}
	return labels, err
}
