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
Every replica at <port>, as <ordinal + 1>=<pod>.<headless service>.<namespace>.svc.<domain>:<port>
(index . 1), comma-separated: the id is the one `phalanx serve --id-from-pod-name` takes
from the pod's own name.
*/}}
{{- define "phalanx.replicasAt" -}}
{{- $ := index . 0 }}
{{- $port := int (index . 1) }}
{{- $full := include "phalanx.fullname" $ }}
{{- $svc := include "phalanx.peersService" $ }}
{{- $peers := list }}
{{- range $i := until (int $.Values.replicas) }}
{{- $peers = append $peers (printf "%d=%s-%d.%s.%s.svc.%s:%d" (add1 $i) $full $i $svc $.Release.Namespace $.Values.clusterDomain $port) }}
{{- end }}
{{- join "," $peers }}
{{- end }}

{{/* --peers: every replica's Raft and ledger port. */}}
{{- define "phalanx.peers" -}}
{{- include "phalanx.replicasAt" (list . .Values.ports.raft) }}
{{- end }}

{{/* --coord-peers: every replica's CoordinatorService (2PC between replicas). */}}
{{- define "phalanx.coordPeers" -}}
{{- include "phalanx.replicasAt" (list . .Values.ports.coord) }}
{{- end }}

{{/* --admin-peers: every replica's admin service (explain forwarded to a shard's owner). */}}
{{- define "phalanx.adminPeers" -}}
{{- include "phalanx.replicasAt" (list . .Values.ports.admin) }}
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

{{/* The user's TLS Secret (tls.secretName; empty: "<fullname>-tls"). */}}
{{- define "phalanx.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "phalanx.fullname" .)) .Values.tls.secretName | trunc 253 }}
{{- end }}

{{/* The Secret cert-manager writes for replica id (index . 1). */}}
{{- define "phalanx.certManagerSecretName" -}}
{{- printf "%s-replica-%d-tls" (include "phalanx.fullname" (index . 0)) (int (index . 1)) }}
{{- end }}

{{- define "phalanx.tlsMountPath" -}}
/etc/phalanx-tls
{{- end }}

{{/*
The projected TLS volume's sources. Every pod of a StatefulSet has the same template, so
every pod mounts the files of every replica, each renamed to "<pod name>.crt/.key": serve's
--tls-cert=$(POD_NAME).crt then picks the pod's own (the kubelet expands $(POD_NAME)), and
the Secret's keys stay named by replica id, independent of the release's name. A key
missing from the Secret keeps the pod in ContainerCreating with an event naming it.
*/}}
{{- define "phalanx.tlsSources" -}}
{{- $full := include "phalanx.fullname" . }}
{{- if .Values.tls.certManager.enabled }}
{{- range $k := until (int .Values.replicas) }}
- secret:
    name: {{ include "phalanx.certManagerSecretName" (list $ (add1 $k)) }}
    items:
      {{- if eq $k 0 }}
      - key: ca.crt
        path: ca.crt
      {{- end }}
      - key: tls.crt
        path: {{ printf "%s-%d.crt" $full $k }}
      - key: tls.key
        path: {{ printf "%s-%d.key" $full $k }}
{{- end }}
{{- else }}
- secret:
    name: {{ include "phalanx.tlsSecretName" . }}
    items:
      - key: ca.crt
        path: ca.crt
      {{- range $k := until (int .Values.replicas) }}
      - key: {{ printf "replica-%d.crt" (add1 $k) }}
        path: {{ printf "%s-%d.crt" $full $k }}
      - key: {{ printf "replica-%d.key" (add1 $k) }}
        path: {{ printf "%s-%d.key" $full $k }}
      {{- end }}
{{- end }}
{{- end }}
