{{/*
Names. The StatefulSet, its headless Service and every object the chart makes are named
from the release, cut to 52 characters so that "<fullname>-<ordinal>" pods and the
"data-<fullname>-<ordinal>" claims stay within the 63 characters of a DNS label.
*/}}
{{- define "phalanx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "phalanx.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless Service that gives each replica its stable DNS name. */}}
{{- define "phalanx.peersService" -}}
{{- printf "%s-peers" (include "phalanx.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "phalanx.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "phalanx.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "phalanx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "phalanx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "phalanx.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "phalanx.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: set it when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "phalanx.configMapName" -}}
{{- printf "%s-config" (include "phalanx.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
--peers: every replica as <ordinal + 1>=<pod>.<headless service>.<namespace>.svc.<domain>:<raft
port>, the rule `phalanx serve --id-from-pod-name` applies to the pod's own name.
*/}}
{{- define "phalanx.peers" -}}
{{- $full := include "phalanx.fullname" . }}
{{- $svc := include "phalanx.peersService" . }}
{{- $peers := list }}
{{- range $i := until (int .Values.replicas) }}
{{- $peers = append $peers (printf "%d=%s-%d.%s.%s.svc.%s:%d" (add1 $i) $full $i $svc $.Release.Namespace $.Values.clusterDomain (int $.Values.ports.raft)) }}
{{- end }}
{{- join "," $peers }}
{{- end }}

{{/*
--coord-peers: every replica's CoordinatorService (2PC between replicas) by the same stable
DNS names as --peers.
*/}}
{{- define "phalanx.coordPeers" -}}
{{- $full := include "phalanx.fullname" . }}
{{- $svc := include "phalanx.peersService" . }}
{{- $peers := list }}
{{- range $i := until (int .Values.replicas) }}
{{- $peers = append $peers (printf "%d=%s-%d.%s.%s.svc.%s:%d" (add1 $i) $full $i $svc $.Release.Namespace $.Values.clusterDomain (int $.Values.ports.coord)) }}
{{- end }}
{{- join "," $peers }}
{{- end }}

{{/* "<host>:<port>", with brackets around an IPv6 host ("[::]:7001"). */}}
{{- define "phalanx.hostPort" -}}
{{- $host := index . 0 }}
{{- if contains ":" $host }}
{{- printf "[%s]:%d" $host (int (index . 1)) }}
{{- else }}
{{- printf "%s:%d" $host (int (index . 1)) }}
{{- end }}
{{- end }}
