{{/* Chart name (nameOverride), cut to 63 characters. */}}
{{- define "conductor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name: fullnameOverride, else <release>-<chart> (or the release name
when it already contains the chart name), cut so that suffixes like "-worker-<name>" still fit. */}}
{{- define "conductor.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 30 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "conductor.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 30 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 30 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "conductor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: conductor
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: dict "root" $ "component" NAME ["worker" NAME]. */}}
{{- define "conductor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "conductor.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .worker }}
conductor.platform/worker: {{ . }}
{{- end }}
{{- end -}}

{{/* All labels of one component's objects (same argument as conductor.selectorLabels). */}}
{{- define "conductor.componentLabels" -}}
{{ include "conductor.labels" .root }}
{{ include "conductor.selectorLabels" . }}
{{- end -}}

{{/* Object names. */}}
{{- define "conductor.gatewayName" -}}
{{- include "conductor.fullname" . -}}
{{- end -}}
{{- define "conductor.modelName" -}}
{{- printf "%s-model" (include "conductor.fullname" .) -}}
{{- end -}}
{{- define "conductor.secretName" -}}
{{- printf "%s-secrets" (include "conductor.fullname" .) -}}
{{- end -}}
{{- define "conductor.poolName" -}}
{{- printf "%s-pool" (include "conductor.fullname" .) -}}
{{- end -}}
{{- define "conductor.gatewayConfigName" -}}
{{- printf "%s-gateway" (include "conductor.fullname" .) -}}
{{- end -}}
{{/* Name of an in-chart worker's Deployment and Service: dict "root" $ "name" WORKER. */}}
{{- define "conductor.workerName" -}}
{{- printf "%s-worker-%s" (include "conductor.fullname" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The reference of an image from its values (repository, tag, digest): repository:tag, or with a
digest repository:tag@digest, which the runtime pulls by the digest alone (the tag is for
readers), so a tag pushed again elsewhere never changes what runs. Every image goes through here. */}}
{{- define "conductor.image" -}}
{{- if .digest -}}
{{- printf "%s:%s@%s" .repository .tag .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{/* Image pull secrets of every pod, as YAML: imagePullSecrets, then a parent chart's
global.imagePullSecrets, each once; empty when there are none. */}}
{{- define "conductor.imagePullSecrets" -}}
{{- $global := (.Values.global | default dict).imagePullSecrets | default list -}}
{{- with concat (.Values.imagePullSecrets | default list) $global | uniq -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}

{{- define "conductor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "conductor.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when the chart owns a Secret (some credential is given literally). */}}
{{- define "conductor.ownsSecret" -}}
{{- $v := .Values -}}
{{- $literal := or $v.apiKeys.keys $v.s3.accessKeyId $v.s3.secretAccessKey $v.huggingfaceToken.value -}}
{{- range $v.providerKeys }}{{ if .value }}{{ $literal = true }}{{ end }}{{ end -}}
{{- if and (include "conductor.vllmKeyUsed" .) $v.vllm.apiKey.value }}{{ $literal = true }}{{ end -}}
{{- if $literal }}true{{ end -}}
{{- end -}}

{{/* "true" when the gateway has client API keys (apiKeys.keys or apiKeys.existingSecret). */}}
{{- define "conductor.hasClientKeys" -}}
{{- if or .Values.apiKeys.keys .Values.apiKeys.existingSecret }}true{{ end -}}
{{- end -}}

{{/* "true" when the release runs a vLLM server (the Conductor model or a deployed worker). */}}
{{- define "conductor.hasVllmServers" -}}
{{- $any := .Values.conductorModel.enabled -}}
{{- range .Values.pool.workers }}{{ if .deploy }}{{ $any = true }}{{ end }}{{ end -}}
{{- if $any }}true{{ end -}}
{{- end -}}

{{/* "true" when the gateway calls the in-chart Conductor model. */}}
{{- define "conductor.usesInChartConductor" -}}
{{- if and .Values.conductorModel.enabled (not .Values.gateway.conductor) }}true{{ end -}}
{{- end -}}

{{/* "true" when the vLLM servers of the release require an API key (vllm.apiKey). */}}
{{- define "conductor.vllmKeyUsed" -}}
{{- if and .Values.vllm.apiKey.enabled (include "conductor.hasVllmServers" .) }}true{{ end -}}
{{- end -}}

{{/* Name of the environment variable of the gateway holding the vLLM servers' key. */}}
{{- define "conductor.vllmKeyEnv" -}}CONDUCTOR_VLLM_API_KEY{{- end -}}

{{/* The secretKeyRef (name, key) of the vLLM servers' key: an existing Secret, the chart's
Secret (literal value) or the generated <fullname>-vllm-api-key. */}}
{{- define "conductor.vllmKeyRef" -}}
{{- $k := .Values.vllm.apiKey -}}
{{- if $k.existingSecret -}}
name: {{ $k.existingSecret }}
key: {{ $k.key }}
{{- else if $k.value -}}
name: {{ include "conductor.secretName" . }}
key: VLLM_API_KEY
{{- else -}}
name: {{ include "conductor.vllmKeySecretName" . }}
key: VLLM_API_KEY
{{- end -}}
{{- end -}}
{{- define "conductor.vllmKeySecretName" -}}
{{- printf "%s-vllm-api-key" (include "conductor.fullname" .) -}}
{{- end -}}

{{/* Topology spread constraints of a component's pods: dict "constraints" LIST "labels" DICT
(the component's selector labels, given to each constraint without a labelSelector). */}}
{{- define "conductor.topologySpread" -}}
{{- $out := list -}}
{{- range .constraints -}}
{{- $c := deepCopy . -}}
{{- if not $c.labelSelector -}}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $.labels) -}}
{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* "true" when a vLLM source is downloaded by the fetcher (s3://, models:/, runs:/). */}}
{{- define "conductor.isRemoteSource" -}}
{{- if or (hasPrefix "s3://" .) (hasPrefix "models:/" .) (hasPrefix "runs:/" .) }}true{{ end -}}
{{- end -}}

{{/* The URL of the Conductor endpoint the gateway calls. */}}
{{- define "conductor.conductorUrl" -}}
{{- if .Values.gateway.conductor -}}
{{- .Values.gateway.conductor -}}
{{- else -}}
{{- printf "http://%s:%v/v1" (include "conductor.modelName" .) .Values.vllm.port -}}
{{- end -}}
{{- end -}}

{{/* The served model name the gateway asks the Conductor endpoint for ("" = the only one). */}}
{{- define "conductor.conductorServedName" -}}
{{- if .Values.gateway.conductorModel -}}
{{- .Values.gateway.conductorModel -}}
{{- else if and (not .Values.gateway.conductor) .Values.conductorModel.enabled -}}
{{- .Values.conductorModel.servedModelName -}}
{{- end -}}
{{- end -}}

{{/* Served model name of an in-chart worker (dict entry of pool.workers). */}}
{{- define "conductor.workerServedName" -}}
{{- .deploy.servedModelName | default .model | default .name -}}
{{- end -}}

{{/* The pool config (YAML) the gateway loads: pool.workers with in-chart workers filled in. */}}
{{- define "conductor.poolYaml" -}}
{{- $root := . -}}
{{- $workers := list -}}
{{- range .Values.pool.workers -}}
{{- $entry := omit . "deploy" -}}
{{- if .deploy -}}
{{- $_ := set $entry "provider" "openai" -}}
{{- $_ := set $entry "model" (include "conductor.workerServedName" .) -}}
{{- $_ := set $entry "endpoint" (printf "http://%s:%v/v1" (include "conductor.workerName" (dict "root" $root "name" .name)) $root.Values.vllm.port) -}}
{{- if $root.Values.vllm.apiKey.enabled -}}
{{- $_ := set $entry "api_key_env" (include "conductor.vllmKeyEnv" $root) -}}
{{- end -}}
{{- end -}}
{{- $workers = append $workers $entry -}}
{{- end -}}
{{- $pool := dict "workers" $workers -}}
{{- with .Values.pool.retry }}{{ $_ := set $pool "retry" . }}{{ end -}}
{{- with .Values.pool.cache }}{{ $_ := set $pool "cache" . }}{{ end -}}
{{- toYaml $pool -}}
{{- end -}}

{{/* The gateway config file (GatewayConfig fields). */}}
{{- define "conductor.gatewayYaml" -}}
{{- $config := deepCopy .Values.gateway.config -}}
{{- if or .Values.apiKeys.keys .Values.apiKeys.existingSecret -}}
{{- $_ := set $config "api_keys_file" "/etc/conductor/keys/api-keys" -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* Environment of S3 access (fetchers; the gateway when it traces). */}}
{{- define "conductor.s3Env" -}}
{{- $s3 := .Values.s3 -}}
{{- if $s3.endpoint }}
- name: AWS_ENDPOINT_URL_S3
  value: {{ $s3.endpoint | quote }}
- name: MLFLOW_S3_ENDPOINT_URL
  value: {{ $s3.endpoint | quote }}
{{- end }}
{{- if $s3.region }}
- name: AWS_DEFAULT_REGION
  value: {{ $s3.region | quote }}
{{- end }}
{{- if $s3.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $s3.existingSecret }}
      key: {{ $s3.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $s3.existingSecret }}
      key: {{ $s3.secretAccessKeyKey }}
{{- else if $s3.accessKeyId }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "conductor.secretName" . }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "conductor.secretName" . }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
{{- with .Values.mlflow.trackingUri }}
- name: MLFLOW_TRACKING_URI
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* envFrom of MLflow credentials. */}}
{{- define "conductor.mlflowEnvFrom" -}}
{{- with .Values.mlflow.existingSecret }}
- secretRef:
    name: {{ . }}
{{- end }}
{{- end -}}

{{/* Checks the schema cannot express; each failure names the value and the fix. */}}
{{- define "conductor.validate" -}}
{{- $v := .Values -}}
{{- if and (not (include "conductor.hasClientKeys" .)) (not $v.allowUnauthenticated) -}}
{{- fail "no client API key: set apiKeys.keys (literal keys) or apiKeys.existingSecret (a Secret with the keys file), or set allowUnauthenticated=true to run the gateway OPEN to anyone its network policy lets in" -}}
{{- end -}}
{{- $keysEnv := $v.gateway.config.api_keys_env | default "CONDUCTOR_API_KEYS" -}}
{{- range (concat $v.providerKeys ($v.gateway.extraEnv | default list)) -}}
{{- if eq .name $keysEnv -}}
{{- fail (printf "%s (the gateway's api_keys_env) is set through providerKeys or gateway.extraEnv: give client keys in apiKeys, where the schema checks each one" $keysEnv) -}}
{{- end -}}
{{- end -}}
{{- $servers := list -}}
{{- if $v.conductorModel.enabled -}}
{{- $servers = append $servers (dict "what" "conductorModel" "spec" $v.conductorModel) -}}
{{- end -}}
{{- $names := dict -}}
{{- range $i, $w := $v.pool.workers -}}
{{- if $w.deploy -}}
{{- $servers = append $servers (dict "what" (printf "pool.workers[%d].deploy" $i) "spec" $w.deploy) -}}
{{- if not $w.name -}}
{{- fail (printf "pool.workers[%d]: a worker with a deploy block needs a name (it names its Deployment and Service)" $i) -}}
{{- end -}}
{{- if hasKey $names $w.name -}}
{{- fail (printf "pool.workers[%d]: the worker name %q is used twice; in-chart workers need distinct names" $i $w.name) -}}
{{- end -}}
{{- $_ := set $names $w.name true -}}
{{- if and $w.provider (ne $w.provider "openai") -}}
{{- fail (printf "pool.workers[%d] (%s): a deployed worker is served by vLLM, so its provider is openai; remove provider %q" $i $w.name $w.provider) -}}
{{- end -}}
{{- if $w.endpoint -}}
{{- fail (printf "pool.workers[%d] (%s): the endpoint of a deployed worker is its Service; remove endpoint" $i $w.name) -}}
{{- end -}}
{{- if and $w.api_key_env $v.vllm.apiKey.enabled -}}
{{- fail (printf "pool.workers[%d] (%s): a deployed worker is called with vllm.apiKey; remove api_key_env" $i $w.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $servers -}}
{{- $image := .spec.image | default dict -}}
{{- $d := $v.vllm.image -}}
{{- $moved := or (and $image.repository (ne $image.repository $d.repository)) (and $image.tag (ne $image.tag $d.tag)) -}}
{{- if and $d.digest $moved (not (hasKey $image "digest")) -}}
{{- fail (printf "%s.image: its repository/tag (%s) is not vllm.image's, whose digest (vllm.image.digest) names a build of %s:%s; give %s.image.digest too (\"\" = pull it by tag)" .what (printf "%s:%s" ($image.repository | default $d.repository) ($image.tag | default $d.tag)) $d.repository $d.tag .what) -}}
{{- end -}}
{{- $gpus := int (dig "gpu" "count" 1 .spec) -}}
{{- $tp := int (.spec.tensorParallelSize | default 1) -}}
{{- if ne (mod $gpus $tp) 0 -}}
{{- fail (printf "%s: tensorParallelSize %d must divide gpu.count %d; use a tensor-parallel size that divides the GPU count (e.g. %d) or more GPUs" .what $tp $gpus $gpus) -}}
{{- end -}}
{{- if not .spec.source -}}
{{- fail (printf "%s.source is empty: set the model to serve, pinned: models:/NAME/VERSION (a registered version), runs:/..., s3://BUCKET/PREFIX or a Hugging Face id" .what) -}}
{{- end -}}
{{- $alias := regexFind "^models:/[^/@]+@" .spec.source -}}
{{- if $alias -}}
{{- fail (printf "%s.source %s is a registry alias, which moves when another version is promoted: each pod would serve whatever it named when the pod started. Pin the version it names now, %s/<VERSION> (docs/serving.md, \"Changing the served model\")" .what .spec.source (trimSuffix "@" $alias)) -}}
{{- end -}}
{{- if eq (.spec.updateStrategy | default "Recreate") "RollingUpdate" -}}
{{- $storage := mergeOverwrite (deepCopy $v.vllm.storage) (.spec.storage | default dict) -}}
{{- if and (eq $storage.type "persistentVolumeClaim") (not $storage.existingClaim) (not (has "ReadWriteMany" $storage.accessModes)) -}}
{{- fail (printf "%s.updateStrategy RollingUpdate starts the new pod beside the old one, which holds the weights' claim: give the claim accessModes [ReadWriteMany] (vllm.storage or %s.storage), or use emptyDir storage" .what .what) -}}
{{- end -}}
{{- end -}}
{{- if and (include "conductor.isRemoteSource" .spec.source) (not (hasPrefix "s3://" .spec.source)) (not $v.mlflow.trackingUri) -}}
{{- fail (printf "%s.source %s is an MLflow URI: set mlflow.trackingUri" .what .spec.source) -}}
{{- end -}}
{{- end -}}
{{- if and (not $v.conductorModel.enabled) (not $v.gateway.conductor) -}}
{{- fail "conductorModel.enabled is false: set gateway.conductor to the URL of a Conductor served elsewhere (or `scripted`)" -}}
{{- end -}}
{{- if and $v.apiKeys.keys $v.apiKeys.existingSecret -}}
{{- fail "apiKeys: give either keys (literal) or existingSecret, not both" -}}
{{- end -}}
{{- if and (or $v.s3.accessKeyId $v.s3.secretAccessKey) $v.s3.existingSecret -}}
{{- fail "s3: give either accessKeyId/secretAccessKey (literal) or existingSecret, not both" -}}
{{- end -}}
{{- if and (or $v.s3.accessKeyId $v.s3.secretAccessKey) (not (and $v.s3.accessKeyId $v.s3.secretAccessKey)) -}}
{{- fail "s3: give both accessKeyId and secretAccessKey (or existingSecret)" -}}
{{- end -}}
{{- if and $v.huggingfaceToken.value $v.huggingfaceToken.existingSecret -}}
{{- fail "huggingfaceToken: give either value (literal) or existingSecret, not both" -}}
{{- end -}}
{{- $provided := dict -}}
{{- range $v.providerKeys -}}
{{- if hasKey $provided .name -}}
{{- fail (printf "providerKeys: %s is given twice" .name) -}}
{{- end -}}
{{- $_ := set $provided .name true -}}
{{- end -}}
{{- range $v.gateway.extraEnv }}{{ $_ := set $provided .name true }}{{ end -}}
{{- if not $v.gateway.extraEnvFrom -}}
{{- range $i, $w := $v.pool.workers -}}
{{- if and $w.api_key_env (not (hasKey $provided $w.api_key_env)) -}}
{{- fail (printf "pool.workers[%d] (%s) reads its key from %s: add {name: %s, value: ...} or {name: %s, existingSecret: ..., key: ...} to providerKeys" $i ($w.name | default $w.model) $w.api_key_env $w.api_key_env $w.api_key_env) -}}
{{- end -}}
{{- end -}}
{{- with $v.gateway.conductorKeyEnv -}}
{{- if and (include "conductor.usesInChartConductor" $) $v.vllm.apiKey.enabled -}}
{{- fail (printf "gateway.conductorKeyEnv (%s) is for a Conductor served elsewhere; the in-chart Conductor model is called with vllm.apiKey: remove it" .) -}}
{{- end -}}
{{- if not (hasKey $provided .) -}}
{{- fail (printf "gateway.conductorKeyEnv names %s: add it to providerKeys" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* The longest request allowed must survive a pod's termination: SIGTERM comes after the
preStop sleep, then uvicorn lets requests finish for drain_timeout_s (GatewayConfig's defaults
when left out: 300 and 30). */ -}}
{{- $gwConfig := $v.gateway.config | default dict -}}
{{- $requestTimeout := 300.0 -}}
{{- if hasKey $gwConfig "request_timeout_s" }}{{ $requestTimeout = float64 $gwConfig.request_timeout_s }}{{ end -}}
{{- $drain := 30.0 -}}
{{- if hasKey $gwConfig "drain_timeout_s" }}{{ $drain = float64 $gwConfig.drain_timeout_s }}{{ end -}}
{{- if lt $drain $requestTimeout -}}
{{- fail (printf "gateway.config.drain_timeout_s (%v) is below gateway.config.request_timeout_s (%v): a request in flight when a pod stops would be cut; raise drain_timeout_s to at least request_timeout_s or lower request_timeout_s" $drain $requestTimeout) -}}
{{- end -}}
{{- $preStop := float64 ($v.gateway.preStopSleepSeconds | default 0) -}}
{{- if le (float64 $v.gateway.terminationGracePeriodSeconds) (addf $drain $preStop) -}}
{{- fail (printf "gateway.terminationGracePeriodSeconds (%v) must exceed gateway.config.drain_timeout_s + gateway.preStopSleepSeconds (%v + %v), or the longest requests are killed on shutdown: raise it or lower them" $v.gateway.terminationGracePeriodSeconds $drain $preStop) -}}
{{- end -}}
{{- $hpa := $v.gateway.autoscaling -}}
{{- if and $hpa.enabled (gt (int $hpa.minReplicas) (int $hpa.maxReplicas)) -}}
{{- fail (printf "gateway.autoscaling: minReplicas %v exceeds maxReplicas %v" $hpa.minReplicas $hpa.maxReplicas) -}}
{{- end -}}
{{- if and $hpa.enabled $hpa.targetCPUUtilizationPercentage (not (dig "resources" "requests" "cpu" "" $v.gateway)) -}}
{{- fail "gateway.autoscaling targets CPU utilisation: set gateway.resources.requests.cpu" -}}
{{- end -}}
{{- $inFlight := $hpa.inFlightRequests | default dict -}}
{{- if and $hpa.enabled (not (or $hpa.targetCPUUtilizationPercentage $hpa.targetMemoryUtilizationPercentage $inFlight.enabled)) -}}
{{- fail "gateway.autoscaling has no target: set targetCPUUtilizationPercentage, targetMemoryUtilizationPercentage or inFlightRequests.enabled" -}}
{{- end -}}
{{- if and $hpa.enabled $inFlight.enabled (not (kindIs "string" $inFlight.averageValue)) -}}
{{- $limit := 256.0 -}}
{{- if hasKey $v.gateway.config "max_concurrent_requests" }}{{ $limit = $v.gateway.config.max_concurrent_requests }}{{ end -}}
{{- if and $limit (ge (float64 $inFlight.averageValue) (float64 $limit)) -}}
{{- fail (printf "gateway.autoscaling.inFlightRequests.averageValue (%v) must be below gateway.config.max_concurrent_requests (%v), or replicas refuse requests before the autoscaler adds any" $inFlight.averageValue $limit) -}}
{{- end -}}
{{- end -}}
{{- if and $v.ingress.enabled $v.ingress.tls (not $v.ingress.hosts) -}}
{{- fail "ingress.tls needs ingress.hosts: TLS is served per host name" -}}
{{- end -}}
{{- end -}}

{{/* Environment of the gateway container: provider keys, tracing access, extraEnv. */}}
{{- define "conductor.gatewayEnv" -}}
{{- $gw := .Values.gateway -}}
{{- $tracing := gt (float64 ($gw.config.trace_sample_rate | default 0)) 0.0 -}}
{{- range .Values.providerKeys }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      {{- if .existingSecret }}
      name: {{ .existingSecret }}
      key: {{ .key }}
      {{- else }}
      name: {{ include "conductor.secretName" $ }}
      key: {{ .name }}
      {{- end }}
{{- end }}
{{- if include "conductor.vllmKeyUsed" . }}
- name: {{ include "conductor.vllmKeyEnv" . }}
  valueFrom:
    secretKeyRef:
      {{- include "conductor.vllmKeyRef" . | nindent 6 }}
{{- end }}
{{- if include "conductor.usesInChartConductor" . }}
# The pinned model (/v1/models, build_info): a new one rolls the gateway's pods too.
- name: CONDUCTOR_MODEL_VERSION
  value: {{ .Values.conductorModel.version | default .Values.conductorModel.source | quote }}
{{- end }}
{{- if $tracing }}
{{- include "conductor.s3Env" . | nindent 0 }}
{{- end }}
{{- with $gw.extraEnv }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end -}}
