{{/* The chart's name. */}}
{{- define "fleetlet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name: prefix of every namespaced object's name. */}}
{{- define "fleetlet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fleetlet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "fleetlet.labels" -}}
helm.sh/chart: {{ include "fleetlet.chart" . }}
app.kubernetes.io/name: {{ include "fleetlet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleetlet
{{- end }}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "manager"). */}}
{{- define "fleetlet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fleetlet.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Names of the ServiceAccounts and components. */}}
{{- define "fleetlet.managerName" -}}{{ include "fleetlet.fullname" . }}-manager{{- end }}
{{- define "fleetlet.schedulerName" -}}{{ include "fleetlet.fullname" . }}-scheduler{{- end }}
{{- define "fleetlet.cleanupName" -}}{{ include "fleetlet.fullname" . }}-cleanup{{- end }}
{{- define "fleetlet.schedulerExtraName" -}}{{ include "fleetlet.fullname" . }}-scheduler-extra{{- end }}

{{/* The user name of a ServiceAccount of this release: include with (list $ "name"). */}}
{{- define "fleetlet.saUser" -}}
system:serviceaccount:{{ (index . 0).Release.Namespace }}:{{ index . 1 }}
{{- end }}

{{/* Whether the Deployments are rendered. */}}
{{- define "fleetlet.managerDeployed" -}}
{{- if and .Values.manager.enabled (not .Values.localProcesses) }}true{{ end }}
{{- end }}
{{- define "fleetlet.schedulerDeployed" -}}
{{- if and .Values.scheduler.enabled (not .Values.localProcesses) }}true{{ end }}
{{- end }}

{{- define "fleetlet.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The cluster name, required. */}}
{{- define "fleetlet.clusterName" -}}
{{- required "clusterName is required: this cluster's name as its targets know it (--set clusterName=…)" .Values.clusterName }}
{{- end }}

{{/* The restricted Pod Security profile, for every container. */}}
{{- define "fleetlet.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "fleetlet.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Spread replicas over nodes unless the user gives an affinity: (dict "ctx" $ "component" "manager" "affinity" .Values.manager.affinity). */}}
{{- define "fleetlet.affinity" -}}
{{- if .affinity }}
{{- toYaml .affinity }}
{{- else }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "fleetlet.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 12 }}
{{- end }}
{{- end }}

{{/* The webhook's CA source: cert-manager, or the manager's rotation. */}}
{{- define "fleetlet.webhookCertManager" -}}
{{- if and .Values.webhook.certManager.enabled (not .Values.webhook.url) }}true{{ end }}
{{- end }}

{{/* Annotations of the post-delete hook's objects: include with (dict "weight" N). */}}
{{- define "fleetlet.hookAnnotations" -}}
helm.sh/hook: post-delete
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/* Labels of the objects the manager would otherwise create itself (the source ClusterRoles, the PriorityClass): fleetlet's managed-by, which the manager and `fleetlet cleanup` look for. */}}
{{- define "fleetlet.sourceRoleLabels" -}}
helm.sh/chart: {{ include "fleetlet.chart" . }}
app.kubernetes.io/name: {{ include "fleetlet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: fleetlet
app.kubernetes.io/managed-by: fleetlet
{{- end }}
