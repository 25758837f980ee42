// Package devices is the source side of Dynamic Resource Allocation across
// clusters: what devices a proxy pod's resource claims ask for, and whether
// a target can give them, from the devices its ClusterSummary counts.
//
// A pod's spec.resourceClaims name ResourceClaimTemplates (a claim per
// pod, made in the target from the template's copy, package follow) or
// shared ResourceClaims. Of each claim spec, Read keeps the DeviceClasses
// its requests name: an exact request (allocationMode ExactCount, count
// devices; All, at least one) needs its class, a firstAvailable request
// needs one of its subrequests' classes. A template or claim missing in
// the source asks for nothing here: package follow refuses it per target,
// saying why.
//
// A target whose ClusterSummary counts devices (it serves
// resource.k8s.io/v1) and lists no DeviceClass the pod needs is not
// eligible, with the reason Why gives; one that counts none leaves the
// check to its own scheduler. Short says that a target's free devices of
// some class are fewer than the pod asks for, which ranks it last: its
// scheduler may still find the devices (counts lag behind allocations), so
// it is not filtered.
package devices
