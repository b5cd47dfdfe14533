{{/*
Names and labels. The chart keeps manifests/' names for a release named "gpusched", and manifests/' labels:
app.kubernetes.io/name and part-of on every object (kustomize's `labels`), app.kubernetes.io/name alone as the
selector. Helm's own labels come on top.
*/}}

{{- define "gpusched.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects: the release name, or release-chart when the release name lacks the chart's. */}}
{{- define "gpusched.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpusched.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpusched.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpusched.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpusched.name" . }}
{{- end }}

{{- define "gpusched.labels" -}}
{{ include "gpusched.selectorLabels" . }}
app.kubernetes.io/part-of: gpusched
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "gpusched.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* gpusched.yaml: config, with profile when given. */}}
{{- define "gpusched.config" -}}
{{- $config := deepCopy .Values.config }}
{{- if .Values.profile }}
{{- $_ := set $config "profile" .Values.profile }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* Settings that do not go together stop the render with a sentence saying why. */}}
{{- define "gpusched.checks" -}}
{{- $election := (.Values.config.leaderElection | default dict) }}
{{- if and (gt (int .Values.replicas) 1) (eq (toString (index $election "enabled")) "false") }}
{{- fail "replicas > 1 needs config.leaderElection.enabled: without leader election every replica schedules" }}
{{- end }}
{{- if not (has .Values.podAntiAffinity (list "required" "preferred")) }}
{{- fail (printf "podAntiAffinity must be required or preferred, not %v" .Values.podAntiAffinity) }}
{{- end }}
{{- if .Values.dashboard.enabled }}
{{- if not (has .Values.dashboard.auth (list "none" "token" "kubernetes")) }}
{{- fail (printf "dashboard.auth must be none, token or kubernetes, not %v" .Values.dashboard.auth) }}
{{- end }}
{{- if and (eq .Values.dashboard.auth "token") (not .Values.dashboard.tokenSecret.name) }}
{{- fail "dashboard.auth=token needs dashboard.tokenSecret.name (a Secret holding the token)" }}
{{- end }}
{{- end }}
{{- end }}
