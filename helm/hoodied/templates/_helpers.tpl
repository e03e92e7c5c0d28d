{{/* Names, labels and the daemon's settings file. */}}
{{- define "hoodied.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hoodied.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "hoodied.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "hoodied.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "hoodied.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hoodied.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The daemon's pods and the Spark Connect server's pods each have a selector of their own, so no
Deployment, Service, PodDisruptionBudget or NetworkPolicy of one selects the other's pods. */}}
{{- define "hoodied.daemonSelectorLabels" -}}
{{ include "hoodied.selectorLabels" . }}
app.kubernetes.io/component: daemon
{{- end }}

{{- define "hoodied.sparkConnectSelectorLabels" -}}
{{ include "hoodied.selectorLabels" . }}
app.kubernetes.io/component: spark-connect
{{- end }}

{{- define "hoodied.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "hoodied.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "hoodied.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hoodied.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hoodied.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "hoodied.sparkConnectUrl" -}}
{{- printf "sc://%s-spark-connect:%d" (include "hoodied.fullname" .) (int .Values.sparkConnect.port) }}
{{- end }}

{{/* The settings file: values.config with the keys the chart owns set over it. */}}
{{- define "hoodied.config" -}}
{{- $managed := dict "http" (dict "address" (printf "0.0.0.0:%d" (int .Values.port))) "grace_period_seconds" .Values.drainTimeoutSeconds -}}
{{- $lock := dict "url" (default "local" .Values.redis.url) -}}
{{- $_ := set $managed "lock" $lock -}}
{{- if .Values.sparkConnect.enabled }}
{{- $_ := set $managed "spark" (dict "master" (include "hoodied.sparkConnectUrl" .)) -}}
{{- end }}
{{- mustMergeOverwrite (deepCopy .Values.config) $managed | toYaml }}
{{- end }}

{{/* The lock URL with the password and TLS files (HOODIED_LOCK__URL); empty when the file URL is enough. */}}
{{- define "hoodied.redisUrl" -}}
{{- $url := .Values.redis.url -}}
{{- if and $url .Values.redis.passwordSecret.name }}
{{- $url = regexReplaceAll "^(rediss?://)([^@/]*@)?" $url "${1}:$(REDIS_PASSWORD)@" }}
{{- end }}
{{- if and $url .Values.redis.tls.enabled }}
{{- $q := printf "ssl_ca_certs=/etc/hoodied/redis-tls/%s" .Values.redis.tls.caKey }}
{{- if and .Values.redis.tls.certKey .Values.redis.tls.keyKey }}
{{- $q = printf "%s&ssl_certfile=/etc/hoodied/redis-tls/%s&ssl_keyfile=/etc/hoodied/redis-tls/%s" $q .Values.redis.tls.certKey .Values.redis.tls.keyKey }}
{{- end }}
{{- $url = printf "%s%s%s" $url (ternary "&" "?" (contains "?" $url)) $q }}
{{- end }}
{{- if ne $url .Values.redis.url }}{{ $url }}{{ end }}
{{- end }}
