package sandbox

import (
	"fmt"
	"strings"
	"time"
)

// Labels that mark the sandbox's fake nodes; kwok manages exactly these.
const (
	kwokNodeLabel      = "type"
	kwokNodeLabelValue = "kwok"
	// KwokNodeSelector selects the fake nodes kwok manages: a cluster's
	// real nodes, not a source's virtual ones.
	KwokNodeSelector = kwokNodeLabel + "=" + kwokNodeLabelValue
	// AnnotationCompleteAfter lets one pod choose how long it runs before it
	// succeeds (a Go duration such as "30s"), instead of Options.CompleteAfter.
	AnnotationCompleteAfter = "sandbox.fleetlet.io/complete-after"
)

// kwokStages returns the kwok Stage definitions every sandbox cluster runs:
// nodes become Ready and keep a lease; pods become Running and Ready; pods
// that do not restart (Never, OnFailure) succeed after completeAfter, so Jobs
// complete; a running pod's spec changes are carried out as a kubelet would
// (stagePodUpdated); pods being deleted go away.
func kwokStages(completeAfter time.Duration) string {
	return strings.Join([]string{
		stageNodeReady,
		stageNodeHeartbeat,
		stagePodRunning,
		stagePodUpdated,
		fmt.Sprintf(stagePodSucceededFormat, completeAfter.Milliseconds(), AnnotationCompleteAfter),
		stagePodGone,
	}, "---\n")
}

const stageNodeReady = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: sandbox-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      addresses:
      - type: InternalIP
        address: {{ NodeIP | Quote }}
      {{ with NodePort }}
      daemonEndpoints:
        kubeletEndpoint:
          Port: {{ . }}
      {{ end }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
        kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
        containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
        kernelVersion: {{ printf "kwok-%s" Version | Quote }}
        osImage: sandbox
        machineID: ""
        systemUUID: ""
        bootID: ""
      phase: Running
`

const stageNodeHeartbeat = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: sandbox-node-heartbeat
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ["True"]
  delay:
    durationMilliseconds: 60000
    jitterDurationMilliseconds: 90000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
      {{ end }}
`

const stagePodRunning = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: sandbox-pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Pending"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      {{ range .spec.readinessGates }}
      - type: {{ .conditionType | Quote }}
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        restartCount: 0
        {{ if eq .restartPolicy "Always" }}
        ready: true
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
        {{ else }}
        ready: true
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
        {{ end }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
        {{ with .resources }}
        resources: {{ YAML . 2 }}
        {{ with .requests }}
        allocatedResources: {{ YAML . 2 }}
        {{ end }}
        {{ end }}
      {{ end }}
      observedGeneration: {{ .metadata.generation }}
      {{ with NodeIPsWith .spec.nodeName }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
`

// stagePodUpdated is a kubelet's answer to a change of a running pod's spec
// (its generation moved past status.observedGeneration): a container whose
// image changed is restarted with it (restartCount, lastState), every
// container's resources are its spec's (an in-place resize, actuated at
// once), ephemeral containers run, and observedGeneration catches up.
const stagePodUpdated = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: sandbox-pod-updated
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '.metadata.generation != .status.observedGeneration'
      operator: In
      values: ["true"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $statuses := .status.containerStatuses }}
      observedGeneration: {{ .metadata.generation }}
      containerStatuses:
      {{ range $i, $c := .spec.containers }}
      {{ $s := index $statuses $i }}
      - name: {{ $c.name | Quote }}
        image: {{ $c.image | Quote }}
        ready: true
        started: true
        {{ if eq $c.image $s.image }}
        restartCount: {{ $s.restartCount }}
        state: {{ YAML $s.state 2 }}
        {{ with $s.lastState }}
        lastState: {{ YAML . 2 }}
        {{ end }}
        {{ else }}
        restartCount: {{ add1 $s.restartCount }}
        state:
          running:
            startedAt: {{ $now | Quote }}
        lastState:
          terminated:
            exitCode: 0
            reason: Completed
            {{ with $s.state.running }}
            startedAt: {{ .startedAt | Quote }}
            {{ end }}
            finishedAt: {{ $now | Quote }}
        {{ end }}
        {{ with $c.resources }}
        resources: {{ YAML . 2 }}
        {{ with .requests }}
        allocatedResources: {{ YAML . 2 }}
        {{ end }}
        {{ end }}
      {{ end }}
      {{ with .spec.ephemeralContainers }}
      ephemeralContainerStatuses:
      {{ range . }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ end }}
`

// stagePodSucceededFormat takes the default delay in milliseconds and the
// annotation that overrides it.
const stagePodSucceededFormat = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: sandbox-pod-succeeded
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '.spec.restartPolicy'
      operator: In
      values: ["Never", "OnFailure"]
  delay:
    durationMilliseconds: %d
    durationFrom:
      expressionFrom: '.metadata.annotations["%s"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: ContainersReady
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
`

const stagePodGone = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: sandbox-pod-gone
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
  next:
    delete: true
`
