package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// Storage in a furnished cluster: a default StorageClass whose claims a
// small provisioner (the Kubernetes storage library's controller, one
// process per cluster) binds to hostPath volumes under the cluster's data
// folder, so that claims bind as in a real cluster: WaitForFirstConsumer,
// the volume pinned to the node the scheduler chose. kwok's nodes mount
// nothing; the binding is real.
const (
	// ComponentProvisioner is the process name of a cluster's provisioner.
	ComponentProvisioner = "storage-provisioner"
	// ProvisionerName is the provisioner of StorageClassStandard.
	ProvisionerName = "sandbox.fleetlet.io/hostpath"
	// StorageClassStandard is the furnished clusters' default StorageClass.
	StorageClassStandard = "standard"
	// provisionerDataDir holds the volumes, in the cluster's data folder.
	provisionerDataDir = "volumes"
)

// provisionerComponent runs `fleetlet-sandbox provision` with the cluster's
// admin kubeconfig, like kwok a test component of the sandbox.
var provisionerComponent = component{
	name:   ComponentProvisioner,
	binary: binSandbox,
	args: func(_ Options, c *ClusterState) []string {
		return []string{"provision", "--kubeconfig=" + c.Kubeconfig, "--volumes=" + filepath.Join(c.DataDir, provisionerDataDir)}
	},
}

// standardStorageClass is the furnished clusters' default StorageClass.
func standardStorageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassStandard,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// ensureStorageClass creates the default StorageClass if it is missing.
func ensureStorageClass(ctx context.Context, cs kubernetes.Interface) error {
	_, err := cs.StorageV1().StorageClasses().Create(ctx, standardStorageClass(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", StorageClassStandard, err)
	}
	return nil
}

// RunProvisioner provisions the claims of StorageClassStandard in the
// cluster kubeconfig reaches until ctx ends: each a hostPath volume, a
// folder under dir, pinned to the node the scheduler chose for the claim's
// first pod; a volume released is removed with its folder.
func RunProvisioner(ctx context.Context, kubeconfig, dir string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pc := controller.NewProvisionController(ctx, cs, ProvisionerName, hostPathProvisioner{dir: dir},
		controller.LeaderElection(false))
	pc.Run(ctx)
	return nil
}

// hostPathProvisioner makes a folder per volume under dir.
type hostPathProvisioner struct{ dir string }

// Provision implements controller.Provisioner.
func (p hostPathProvisioner) Provision(_ context.Context, o controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if o.PVC.Spec.Selector != nil {
		return nil, controller.ProvisioningFinished, errors.New("claims with a selector are not supported")
	}
	path := filepath.Join(p.dir, o.PVName)
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if o.StorageClass.ReclaimPolicy != nil {
		reclaim = *o.StorageClass.ReclaimPolicy
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   o.PVC.Spec.AccessModes,
			VolumeMode:                    o.PVC.Spec.VolumeMode,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: o.PVC.Spec.Resources.Requests[corev1.ResourceStorage]},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(corev1.HostPathDirectoryOrCreate)},
			},
		},
	}
	if o.SelectedNodeName != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{o.SelectedNodeName}}},
		}}}}
	}
	return pv, controller.ProvisioningFinished, nil
}

// Delete implements controller.Provisioner: the volume's folder goes, and
// nothing outside dir is ever touched.
func (p hostPathProvisioner) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.HostPath == nil {
		return &controller.IgnoredError{Reason: "not a hostPath volume"}
	}
	path := filepath.Clean(pv.Spec.HostPath.Path)
	if !strings.HasPrefix(path, filepath.Clean(p.dir)+string(filepath.Separator)) {
		return &controller.IgnoredError{Reason: "not a volume of this provisioner"}
	}
	return os.RemoveAll(path)
}
