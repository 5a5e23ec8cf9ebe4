{{/*
Names, labels and the few decisions every template shares. A template asks these helpers
("is HA on?", "are the monitoring CRDs served?") instead of repeating the condition.
*/}}

{{- define "sparkllm.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* At most 43 characters: "<fullname>-operator" names a StatefulSet, whose pods carry
the label controller-revision-hash=<name>-<10 chars>, itself limited to 63. */}}
{{- define "sparkllm.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 43 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 43 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The operator's workload, Service and ServiceAccount name. */}}
{{- define "sparkllm.operatorName" -}}
{{- printf "%s-operator" (include "sparkllm.fullname" .) -}}
{{- end -}}

{{- define "sparkllm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sparkllm.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sparkllm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sparkllm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sparkllm
{{- end -}}

{{- define "sparkllm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sparkllm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- /* The one sparkllm image: repository@digest when image.digest is set, else
repository:tag (tag default: the chart's appVersion). The operator runs it and hands it on
to every pod it makes (templates/operator.yaml, env SPARKLLM_IMAGE). */ -}}
{{- define "sparkllm.image" -}}
{{- if eq .Values.image.tag "latest" -}}
{{- fail "image.tag: use an exact tag (or leave it empty for the chart's appVersion), not latest" -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the operator watches every namespace (no watchNamespaces given). */}}
{{- define "sparkllm.watchAll" -}}
{{- if empty .Values.watchNamespaces -}}true{{- end -}}
{{- end -}}

{{/* "true" when several operator pods run with kopf peering (one active). */}}
{{- define "sparkllm.peering" -}}
{{- if gt (int .Values.replicas) 1 -}}true{{- end -}}
{{- end -}}

{{/* "true" when the cluster serves the Prometheus operator's API (its CRDs exist). */}}
{{- define "sparkllm.monitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}
