// Package claims keeps a proxy pod's PersistentVolumeClaims with it, on the
// source side: a claim the pod mounts lives in one target, and every pod
// that mounts it is elected there.
//
// A claim of the source is placed when it carries the
// multicluster.fleetlet.io/target annotation (the target's key, as the
// election record and the virtual node name it). Placing is recorded on the
// source claim before anything is created for it in the target, so that a
// crash never leaves a copy that no record names. The elector (package
// elector) decides where: a pod whose claims are all unplaced is first
// scheduled by probe candidates (an emptyDir in place of each claim), and
// the best probe's target is recorded on its claims; a pod with a placed
// claim is elected only into that target, and waits, saying why, while
// that target cannot take it.
//
// The copy in the target (Ensure) has the claim's name and namespace, the
// source's parent-cluster label and parent-uid label (the source claim's
// UID), the parent annotations, and the claim's access modes, requests,
// volume mode and storage class; never its volumeName, selector or data
// source, which name objects of the source. The target's own scheduler and
// provisioner bind it, WaitForFirstConsumer or Immediate, when the elected
// candidate there is scheduled. A copy of an earlier claim of the same name
// (another parent UID) is deleted first; an object of that name that is
// not this source's is a clash: the target is filtered for the pod.
package claims
