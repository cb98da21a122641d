{{/*
Expand the name of the chart.
*/}}
{{- define "llmserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "llmserve.fullname" -}}
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

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "llmserve.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "llmserve.labels" -}}
helm.sh/chart: {{ include "llmserve.chart" . }}
{{ include "llmserve.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: llmserve
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "llmserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llmserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The gateway's labels and selector labels.
*/}}
{{- define "llmserve.gateway.fullname" -}}
{{- printf "%s-gateway" (include "llmserve.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "llmserve.gateway.selectorLabels" -}}
{{ include "llmserve.selectorLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "llmserve.gateway.labels" -}}
{{ include "llmserve.labels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{/*
Worker groups: (dict "root" $ "group" $g) where $g is a merged group (llmserve.workerGroups).
*/}}
{{- define "llmserve.worker.fullname" -}}
{{- printf "%s-worker-%s" (include "llmserve.fullname" .root) .group.name }}
{{- end }}

{{- define "llmserve.worker.selectorLabels" -}}
{{ include "llmserve.selectorLabels" .root }}
app.kubernetes.io/component: worker
llmserve.io/worker-group: {{ .group.name }}
{{- end }}

{{- define "llmserve.worker.labels" -}}
{{ include "llmserve.labels" .root }}
app.kubernetes.io/component: worker
llmserve.io/worker-group: {{ .group.name }}
{{- end }}

{{/*
Labels every worker pod has, whatever its group (the NetworkPolicy and monitors select on them).
*/}}
{{- define "llmserve.worker.commonSelectorLabels" -}}
{{ include "llmserve.selectorLabels" . }}
app.kubernetes.io/component: worker
{{- end }}

{{/*
The name of the service account to use.
*/}}
{{- define "llmserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "llmserve.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Deep merge: (list $dst $src) sets every key of $src into $dst, recursing where both are maps.
Unlike sprig's merge/mergeOverwrite it also copies false, 0 and "" (a group that turns a default
off really turns it off).
*/}}
{{- define "llmserve.deepMerge" -}}
{{- $dst := index . 0 -}}
{{- $src := index . 1 -}}
{{- range $k, $v := $src -}}
{{- if and (kindIs "map" $v) (kindIs "map" (get $dst $k)) -}}
{{- include "llmserve.deepMerge" (list (get $dst $k) $v) -}}
{{- else if kindIs "invalid" $v -}}
{{- $_ := set $dst $k nil -}}
{{- else -}}
{{- $_ := set $dst $k (deepCopy $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The worker groups, each workerDefaults merged with its entry, as YAML: {groups: [...]}.
Use: (include "llmserve.workerGroups" . | fromYaml).groups
*/}}
{{- define "llmserve.workerGroups" -}}
{{- $groups := list -}}
{{- range $entry := .Values.workers -}}
{{- $g := deepCopy $.Values.workerDefaults -}}
{{- include "llmserve.deepMerge" (list $g $entry) -}}
{{- $groups = append $groups $g -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}

{{/*
The worker image of a merged group: (dict "root" $ "group" $g).
*/}}
{{- define "llmserve.worker.image" -}}
{{- $img := .group.image -}}
{{- $tag := $img.tag -}}
{{- if not $tag -}}
{{- $tag = .root.Chart.AppVersion -}}
{{- if eq .group.backend "cuda" }}{{ $tag = printf "%s%s" $tag $img.cudaSuffix }}{{ end -}}
{{- end -}}
{{- printf "%s:%s" $img.repository $tag -}}
{{- end -}}

{{- define "llmserve.gateway.image" -}}
{{- printf "%s:%s" .Values.gateway.image.repository (.Values.gateway.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
Seconds as a flag duration: 30 -> 30s.
*/}}
{{- define "llmserve.seconds" -}}
{{- printf "%ds" (int .) -}}
{{- end -}}

{{/*
The gateway's --worker_dns: one <headless service>.<namespace>.svc.<clusterDomain>:<grpc port> per
worker group.
*/}}
{{- define "llmserve.workerDns" -}}
{{- $root := . -}}
{{- $entries := list -}}
{{- range $g := (include "llmserve.workerGroups" . | fromYaml).groups -}}
{{- $name := include "llmserve.worker.fullname" (dict "root" $root "group" $g) -}}
{{- $entries = append $entries (printf "%s.%s.svc.%s:%d" $name $root.Release.Namespace $root.Values.clusterDomain (int $g.ports.grpc)) -}}
{{- end -}}
{{- join "," $entries -}}
{{- end -}}

{{/*
The Secret holding the chart-made auth material (API keys file, generated key, JWT key).
*/}}
{{- define "llmserve.gateway.authSecretName" -}}
{{- printf "%s-auth" (include "llmserve.gateway.fullname" .) -}}
{{- end -}}

{{- define "llmserve.gateway.tlsSecretName" -}}
{{- .Values.gateway.tls.existingSecret | default (printf "%s-tls" (include "llmserve.gateway.fullname" .)) -}}
{{- end -}}

{{/*
Whether the chart makes the API keys file: "true" or "".
*/}}
{{- define "llmserve.gateway.chartApiKeys" -}}
{{- $k := .Values.gateway.auth.apiKeys -}}
{{- if and (not $k.existingSecret) (or $k.generate $k.keys) }}true{{ end -}}
{{- end -}}

{{- define "llmserve.gateway.apiKeysEnabled" -}}
{{- if or .Values.gateway.auth.apiKeys.existingSecret (include "llmserve.gateway.chartApiKeys" .) }}true{{ end -}}
{{- end -}}

{{/*
Gateway metrics port: its own port when set, else the HTTP port.
*/}}
{{- define "llmserve.gateway.metricsPortName" -}}
{{- if gt (int .Values.gateway.ports.metrics) 0 }}metrics{{ else }}http{{ end -}}
{{- end -}}

{{- define "llmserve.gateway.metricsPort" -}}
{{- if gt (int .Values.gateway.ports.metrics) 0 }}{{ .Values.gateway.ports.metrics }}{{ else }}{{ .Values.gateway.ports.http }}{{ end -}}
{{- end -}}

{{/*
Scrape annotations are used when neither a ServiceMonitor nor a PodMonitor is made.
*/}}
{{- define "llmserve.scrapeAnnotations" -}}
{{- $m := .Values.monitoring -}}
{{- if and $m.scrapeAnnotations (not $m.serviceMonitor.enabled) (not $m.podMonitor.enabled) }}true{{ end -}}
{{- end -}}

{{/*
The tracing flags of both binaries (values.tracing); nothing without an endpoint.
*/}}
{{- define "llmserve.tracingArgs" -}}
{{- with .Values.tracing }}
{{- if .endpoint }}
- {{ printf "--otlp_traces_endpoint=%s" .endpoint | quote }}
- --trace_sample_ratio={{ .sampleRatio }}
- --otlp_compression={{ .compression }}
- --otlp_timeout={{ .timeout }}
{{- if .content }}
- --trace_content=true
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The tracing environment of both binaries: the export headers from their Secret.
*/}}
{{- define "llmserve.tracingEnv" -}}
{{- with .Values.tracing }}
{{- if and .endpoint .headersSecret }}
- name: OTEL_EXPORTER_OTLP_TRACES_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ .headersSecret }}
      key: {{ .headersSecretKey }}
{{- end }}
{{- end }}
{{- end }}
