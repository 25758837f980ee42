// Package naming gives the names fleetlet uses for what it creates in target
// clusters, the same in every target, so that a restart never doubles an
// object and a StatefulSet pod recreated under the same name never meets its
// predecessor's objects.
package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// maxNameLength keeps remote names valid DNS labels, so that they can serve
// as label values and host names as well as object names.
const maxNameLength = 63

// hashLength is how many hex digits of the UID's hash end a remote name.
const hashLength = 8

// UIDHash returns the first 8 hex digits of sha256(uid).
func UIDHash(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:])[:hashLength]
}

// RemoteName is the name, in a target, of the chaperon, candidate and delegate
// of the proxy pod (name, uid): "<name, truncated>-<UIDHash(uid)>", at most
// 63 characters.
func RemoteName(name string, uid types.UID) string {
	prefix := name
	if max := maxNameLength - hashLength - 1; len(prefix) > max {
		prefix = prefix[:max]
	}
	prefix = strings.TrimRight(prefix, "-.")
	if prefix == "" {
		return UIDHash(uid)
	}
	return prefix + "-" + UIDHash(uid)
}
