{{/*
Name prefix of every object: "<release>-operator" when the release name already says
"steward" (the default release "steward" gives "steward-operator", as in deploy/*.yaml),
otherwise "<release>-steward-operator".
*/}}
{{- define "steward.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "steward" .Release.Name -}}
{{- printf "%s-operator" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-steward-operator" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "steward.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "steward.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "steward.selectorLabels" -}}
app.kubernetes.io/name: steward
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "steward.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "steward.selectorLabels" . }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: steward
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
Plurals of Steward's custom resources: one per CRD in crds/steward.dev.yaml.
.ci/check-deploy.sh fails when a CRD is missing here or in deploy/rbac.yaml.
*/}}
{{- define "steward.customResources" -}}
{{- list "etcdclusters" "etcdpeers" "etcdbackups" "postgresclusters" "postgresbackups" "postgresrestores" "postgresupgrades" "schedules" "postgrespolicies" "crateclusters" "foundationdbclusters" "foundationdbbackups" "foundationdbrestores" | toJson -}}
{{- end -}}

{{/*
Rules for Steward's resources and the children it manages. Rendered into a ClusterRole
(all namespaces) or into a Role in .Values.watchNamespace. Reasons: docs/deployment.md, "RBAC".
*/}}
{{- define "steward.operatorRules" -}}
{{- $crs := include "steward.customResources" . | fromJsonArray -}}
{{- $status := list -}}
{{- $finalizers := list -}}
{{- range $crs -}}
{{- $status = append $status (printf "%s/status" .) -}}
{{- $finalizers = append $finalizers (printf "%s/finalizers" .) -}}
{{- end -}}
- apiGroups: ["steward.dev"]
  resources: {{ $crs | toJson }}
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["steward.dev"]
  resources: {{ $status | toJson }}
  verbs: ["patch"]
- apiGroups: ["steward.dev"]
  resources: {{ $finalizers | toJson }}
  verbs: ["update"]
# Children the code applies, caches and sweeps today (engines add rows as they need them).
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Member claims: cached, created when missing, deleted only as the retention policies say
# (retainOnScaleDown / retainOnDelete: Delete); a PostgreSQL restore creates its new claim and
# labels the claims it replaced (patch), which it never deletes; an etcd snapshot claim is
# read (get) and created when missing, never deleted.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Member and instance Pods: cached, created, deleted to replace or fence them; patched to move
# the PostgreSQL primary's role label.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# PostgreSQL backups: `pgbackrest info` in the repository host's container; CrateDB: `crash`
# in a master's container for the license and the system user (a WebSocket
# upgrade: API servers before 1.35 authorize it as `get`, 1.35+ as `create`).
- apiGroups: [""]
  resources: ["pods/exec"]
  verbs: ["get", "create"]
# etcd snapshots: the check container's log of a snapshot Job (`snapshot status` as JSON).
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
# PostgreSQL: generated credential Secrets (created once), users' password Secrets (read,
# labelled, watched by label), the applied-passwords record. Never deleted by the operator.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# PostgreSQL configuration, server-side applied (Steward's own watched as metadata only, so an
# unchanged one is not re-applied); a PostgresPolicy's SQL held in a ConfigMap (get).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "patch"]
# The members' disruption budget, server-side applied (watched as metadata only, as above).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "patch"]
# PostgreSQL backups: the pgBackRest Jobs (stanza-create, backups, restores, clones), watched
# until they end, deleted to re-run stanza-create or to stop a backup past its deadline; etcd
# snapshot Jobs, read until they end, deleted past their deadline.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
# CrateDB: one StatefulSet per node set, server-side applied and cached; scaling patches its
# replicas.
- apiGroups: ["apps"]
  resources: ["statefulsets", "deployments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

{{/* Fails the render on values that would deploy a broken operator. */}}
{{- define "steward.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled=true: two leaders would reconcile the same clusters" -}}
{{- end -}}
{{- if .Values.webhook.url -}}
{{- if not .Values.webhook.username -}}
{{- fail "webhook.url is set: webhook.username is required" -}}
{{- end -}}
{{- if not .Values.webhook.passwordSecret.name -}}
{{- fail "webhook.url is set: webhook.passwordSecret.name (an existing Secret holding the password) is required" -}}
{{- end -}}
{{- end -}}
{{- end -}}
