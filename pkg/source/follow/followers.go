package follow

import (
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// followers are the proxy pods a copy serves: UID → pod name (proxies live
// in the copy's namespace).
type followers map[types.UID]string

// followersOf reads the followers annotation of a copy. Entries that cannot
// be read are dropped: they name no proxy.
func followersOf(obj metav1.Object) followers {
	out := followers{}
	for _, entry := range strings.Split(obj.GetAnnotations()[v1alpha1.AnnotationFollowers], ",") {
		name, uid, ok := strings.Cut(strings.TrimSpace(entry), "/")
		if !ok || name == "" || uid == "" {
			continue
		}
		out[types.UID(uid)] = name
	}
	return out
}

// uids are the followers' UIDs, sorted.
func (f followers) uids() []types.UID {
	out := make([]types.UID, 0, len(f))
	for uid := range f {
		out = append(out, uid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// String is the annotation's value: "name/uid" entries sorted by UID.
func (f followers) String() string {
	entries := make([]string, 0, len(f))
	for _, uid := range f.uids() {
		entries = append(entries, f[uid]+"/"+string(uid))
	}
	return strings.Join(entries, ",")
}

// setFollowers writes the followers annotation of obj.
func setFollowers(obj metav1.Object, f followers) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[v1alpha1.AnnotationFollowers] = f.String()
	obj.SetAnnotations(a)
}
