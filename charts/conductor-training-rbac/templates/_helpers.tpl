{{/* Name of the Role and RoleBinding: the release name, cut to 63 characters. */}}
{{- define "conductor-training-rbac.fullname" -}}
{{- printf "%s-trainjob-launcher" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the pod-log Role and RoleBinding. */}}
{{- define "conductor-training-rbac.logsName" -}}
{{- printf "%s-logs" (include "conductor-training-rbac.fullname" . | trunc 58 | trimSuffix "-") -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "conductor-training-rbac.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: conductor
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The service account bound to the Role: serviceAccount.name, else the account Kubeflow Pipelines
runs a task as when the run names none (KFP's DEFAULTPIPELINERUNNERSERVICEACCOUNT):
"pipeline-runner" in standalone KFP, "default-editor" in a multi-user profile namespace.
*/}}
{{- define "conductor-training-rbac.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.create -}}
{{- fail "serviceAccount.create needs serviceAccount.name" -}}
{{- else if eq .Values.kfp.mode "multi-user" -}}
default-editor
{{- else -}}
pipeline-runner
{{- end -}}
{{- end -}}

{{/* Namespace of the TrainJobs, their ConfigMaps and pods: trainingNamespace, else the release's. */}}
{{- define "conductor-training-rbac.trainingNamespace" -}}
{{- .Values.trainingNamespace | default .Release.Namespace -}}
{{- end -}}

{{/*
Subjects of the pod-log and runtime-reading bindings: the chart's account and the service
accounts of extraSubjects (launchers), not its users or groups.
*/}}
{{- define "conductor-training-rbac.serviceAccountSubjects" -}}
- kind: ServiceAccount
  name: {{ include "conductor-training-rbac.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- range .Values.extraSubjects }}
{{- if eq .kind "ServiceAccount" }}
- kind: ServiceAccount
  name: {{ .name }}
  namespace: {{ .namespace }}
{{- end }}
{{- end }}
{{- end -}}
