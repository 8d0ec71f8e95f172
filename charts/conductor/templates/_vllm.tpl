{{/*
A vLLM OpenAI-compatible server: Deployment, Service and (with persistent storage and no
existing claim) a PersistentVolumeClaim.
Argument: dict
  "root"      the chart's root context
  "name"      object name (Deployment, Service)
  "key"       folder name of the weights under /models (conductor, or the worker's name)
  "component" app.kubernetes.io/component (conductor-model | worker)
  "worker"    the worker's name ("" for the Conductor)
  "spec"      the server's values (conductorModel, or a pool worker's deploy block)
*/}}
{{- define "conductor.vllmServer" -}}
{{- $root := .root -}}
{{- $d := $root.Values.vllm -}}
{{- $s := .spec -}}
{{- $labelArgs := dict "root" $root "component" .component "worker" .worker -}}
{{- $image := mergeOverwrite (deepCopy $d.image) ($s.image | default dict) -}}
{{- /* mergeOverwrite keeps vllm.image's digest under an empty one: a server's digest "" pulls by tag */ -}}
{{- if hasKey ($s.image | default dict) "digest" }}{{ $_ := set $image "digest" $s.image.digest }}{{ end -}}
{{- $storage := mergeOverwrite (deepCopy $d.storage) ($s.storage | default dict) -}}
{{- $runtimeClass := $s.runtimeClassName | default $d.runtimeClassName -}}
{{- $nodeSelector := $s.nodeSelector | default $d.nodeSelector -}}
{{- $tolerations := $s.tolerations | default $d.tolerations -}}
{{- $affinity := $s.affinity | default $d.affinity -}}
{{- $gpus := int (dig "gpu" "count" 1 $s) -}}
{{- $tp := int ($s.tensorParallelSize | default 1) -}}
{{- $rest := div $gpus $tp -}}
{{- $remote := include "conductor.isRemoteSource" $s.source -}}
{{- $modelPath := $s.source -}}
{{- if $remote }}{{ $modelPath = printf "/models/%s" .key }}{{ end -}}
{{- $claim := $storage.existingClaim | default (printf "%s-models" .name) -}}
{{- $hfToken := $root.Values.huggingfaceToken -}}
{{- $filter := $d.pathFilter -}}
{{- /* with the path filter, vLLM listens on loopback only and the filter on the pod's port */ -}}
{{- $vllmHost := ternary "127.0.0.1" "0.0.0.0" $filter.enabled -}}
{{- $vllmPort := ternary $filter.internalPort $d.port $filter.enabled -}}
{{- if and $filter.enabled (eq (int $filter.internalPort) (int $d.port)) -}}
{{- fail (printf "vllm.pathFilter.internalPort (%v) must differ from vllm.port: the filter listens on vllm.port, vLLM behind it on internalPort" $filter.internalPort) -}}
{{- end -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "conductor.componentLabels" $labelArgs | nindent 4 }}
spec:
  {{- /* hasKey, not default: 0 (scaled to zero, the Deployment kept) is a value */}}
  replicas: {{ if hasKey $s "replicaCount" }}{{ $s.replicaCount }}{{ else }}1{{ end }}
  strategy:
    {{- if eq ($s.updateStrategy | default "Recreate") "RollingUpdate" }}
    # The new pod starts beside the old one (GPUs for one more pod); the old one stops once the
    # new one is ready.
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
    {{- else }}
    # A new pod needs the GPUs of the old one: replace, do not surge.
    type: Recreate
    {{- end }}
  selector:
    matchLabels:
      {{- include "conductor.selectorLabels" $labelArgs | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "conductor.componentLabels" $labelArgs | nindent 8 }}
      {{- $keyUsed := include "conductor.vllmKeyUsed" $root }}
      {{- if or $d.podAnnotations $keyUsed }}
      annotations:
        {{- if $keyUsed }}
        # Roll the pods when a literal vllm.apiKey.value changes (the gateway rolls too).
        checksum/api-key: {{ printf "%s|%s" (include "conductor.vllmKeyRef" $root) $root.Values.vllm.apiKey.value | sha256sum }}
        {{- end }}
        {{- with $d.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "conductor.serviceAccountName" $root }}
      automountServiceAccountToken: {{ $root.Values.serviceAccount.automountToken }}
      # No <SERVICE>_PORT variables: a Service named "vllm" would set VLLM_PORT, which vLLM reads.
      enableServiceLinks: false
      {{- with $runtimeClass }}
      runtimeClassName: {{ . }}
      {{- end }}
      {{- with include "conductor.imagePullSecrets" $root }}
      imagePullSecrets:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with $d.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $d.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- include "conductor.topologySpread" (dict "constraints" . "labels" (include "conductor.selectorLabels" $labelArgs | fromYaml)) | nindent 8 }}
      {{- end }}
      {{- if $remote }}
      initContainers:
        # Downloads the weights (s3://, models:/NAME/VERSION, runs:/) with the library's own
        # loader into a folder of their own, links /models/{{ .key }} to the folder holding
        # config.json and records the source beside the link; on persistent storage the fetch is
        # skipped when the link holds this source already, and a new source replaces the old
        # one (its download removed once the link has moved).
        - name: fetch-weights
          image: {{ include "conductor.image" $d.fetcher.image | quote }}
          imagePullPolicy: {{ $d.fetcher.image.pullPolicy }}
          command:
            - python
            - -c
            - |
              import hashlib, os, pathlib, shutil, sys
              root = pathlib.Path("/models")
              uri = os.environ["MODEL_URI"]
              link = root / os.environ["MODEL_KEY"]
              recorded = root / f".{link.name}.source"
              (root / ".tmp").mkdir(exist_ok=True)
              if (
                  os.environ.get("SKIP_IF_PRESENT") == "true"
                  and (link / "config.json").is_file()
                  and recorded.is_file()
                  and recorded.read_text() == uri
              ):
                  print(f"{link} holds {uri}: not downloading", flush=True)
                  sys.exit(0)
              from conductor_core.errors import ConductorError
              from conductor_core.track.registry import load_model_dir
              downloads = root / ".download" / link.name
              target = downloads / hashlib.sha256(uri.encode()).hexdigest()[:16]
              try:
                  folder = load_model_dir(uri, target)
              except ConductorError as exc:
                  sys.exit(f"cannot fetch {uri}: {exc}")
              if link.is_symlink() or link.exists():
                  link.unlink()
              link.symlink_to(os.path.relpath(folder, root))
              recorded.write_text(uri)
              for old in downloads.iterdir():  # what earlier sources left
                  if old.is_dir() and old != target:
                      shutil.rmtree(old, ignore_errors=True)
                  elif not old.is_dir():
                      old.unlink()
              print(f"{uri} -> {link} ({folder})", flush=True)
          env:
            - name: MODEL_URI
              value: {{ $s.source | quote }}
            - name: MODEL_KEY
              value: {{ .key | quote }}
            - name: SKIP_IF_PRESENT
              value: {{ and $d.fetcher.skipIfPresent (eq $storage.type "persistentVolumeClaim") | quote }}
            - name: TMPDIR
              value: /models/.tmp
            {{- with include "conductor.s3Env" $root | trim }}
            {{- . | nindent 12 }}
            {{- end }}
          {{- with include "conductor.mlflowEnvFrom" $root }}
          envFrom:
            {{- . | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml $d.fetcher.resources | nindent 12 }}
          securityContext:
            runAsNonRoot: true
            runAsUser: 10001
            runAsGroup: 10001
            allowPrivilegeEscalation: false
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: models
              mountPath: /models
      {{- end }}
      containers:
        - name: vllm
          image: {{ include "conductor.image" $image | quote }}
          imagePullPolicy: {{ $image.pullPolicy }}
          command:
            {{- toYaml $d.command | nindent 12 }}
          args:
            - {{ $modelPath | quote }}
            - --served-model-name
            - {{ .served | quote }}
            - --host
            - {{ $vllmHost | quote }}
            - --port
            - {{ $vllmPort | quote }}
            - --tensor-parallel-size
            - {{ $tp | quote }}
            {{- if gt $rest 1 }}
            - {{ ternary "--pipeline-parallel-size" "--data-parallel-size" (eq ($s.remainingGpusAs | default "data") "pipeline") }}
            - {{ $rest | quote }}
            {{- end }}
            {{- with $s.maxModelLen }}
            - --max-model-len
            - {{ . | quote }}
            {{- end }}
            {{- with $s.gpuMemoryUtilization }}
            - --gpu-memory-utilization
            - {{ . | quote }}
            {{- end }}
            {{- with $s.dtype }}
            - --dtype
            - {{ . | quote }}
            {{- end }}
            {{- range $s.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            - name: HF_HOME
              value: /models/.hf-cache
            # Writable places under a read-only root filesystem (volumes home and tmp): caches
            # of vLLM, torch.compile, Triton and FlashInfer go under HOME; USER names the uid,
            # which has no passwd entry, for getpass (torch.compile's cache folder).
            - name: HOME
              value: /home/vllm
            - name: USER
              value: vllm
            - name: XDG_CACHE_HOME
              value: /home/vllm/.cache
            - name: XDG_CONFIG_HOME
              value: /home/vllm/.config
            - name: TMPDIR
              value: /tmp
            {{- if include "conductor.vllmKeyUsed" $root }}
            # vLLM's --api-key (its default is this variable): /v1 requests need it.
            - name: VLLM_API_KEY
              valueFrom:
                secretKeyRef:
                  {{- include "conductor.vllmKeyRef" $root | nindent 18 }}
            {{- end }}
            {{- if $remote }}
            - name: HF_HUB_OFFLINE
              value: "1"
            {{- end }}
            - name: HF_HUB_DISABLE_TELEMETRY
              value: "1"
            - name: VLLM_NO_USAGE_STATS
              value: "1"
            {{- if and (not $remote) (or $hfToken.value $hfToken.existingSecret) }}
            - name: HF_TOKEN
              valueFrom:
                secretKeyRef:
                  name: {{ $hfToken.existingSecret | default (include "conductor.secretName" $root) }}
                  key: {{ ternary $hfToken.key "HF_TOKEN" (ne $hfToken.existingSecret "") }}
            {{- end }}
            {{- with $s.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if not $filter.enabled }}
          ports:
            - name: http
              containerPort: {{ $d.port }}
              protocol: TCP
          {{- end }}
          # Loading the weights into the GPUs takes minutes: the startup probe's budget is
          # periodSeconds x failureThreshold; liveness starts only after it succeeds. With the
          # path filter the probes go through it (vLLM listens on loopback only).
          startupProbe:
            httpGet:
              path: /health
              port: {{ $d.port }}
            {{- toYaml $d.startupProbe | nindent 12 }}
          readinessProbe:
            httpGet:
              path: /health
              port: {{ $d.port }}
            {{- toYaml $d.readinessProbe | nindent 12 }}
          livenessProbe:
            httpGet:
              path: /health
              port: {{ $d.port }}
            {{- toYaml $d.livenessProbe | nindent 12 }}
          resources:
            {{- $resources := deepCopy ($s.resources | default dict) }}
            {{- $limits := $resources.limits | default dict }}
            {{- $_ := set $limits $d.gpuResource $gpus }}
            {{- $_ := set $resources "limits" $limits }}
            {{- if hasKey $resources "requests" }}
            {{- $_ := set $resources.requests $d.gpuResource $gpus }}
            {{- end }}
            {{- toYaml $resources | nindent 12 }}
          {{- with $d.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          volumeMounts:
            - name: models
              mountPath: /models
            - name: dshm
              mountPath: /dev/shm
            - name: home
              mountPath: /home/vllm
            - name: tmp
              mountPath: /tmp
        {{- if $filter.enabled }}
        # The pod's port: only the routes the gateway, the probes and Prometheus use reach vLLM
        # (conductor_core/serve/model_proxy.py); /tokenize, /invocations, /pooling, /score
        # and the rest, which vLLM's --api-key leaves open, get 403.
        - name: path-filter
          {{- $gwImage := $root.Values.gateway.image }}
          image: {{ include "conductor.image" $gwImage | quote }}
          imagePullPolicy: {{ $gwImage.pullPolicy }}
          command: ["python", "-m", "conductor_core.serve.model_proxy"]
          args:
            - --port
            - {{ $d.port | quote }}
            - --upstream
            - {{ printf "http://127.0.0.1:%v" $filter.internalPort | quote }}
          ports:
            - name: http
              containerPort: {{ $d.port }}
              protocol: TCP
          livenessProbe:
            tcpSocket:
              port: http
            periodSeconds: 20
            timeoutSeconds: 5
            failureThreshold: 3
          resources:
            {{- toYaml $filter.resources | nindent 12 }}
          securityContext:
            runAsNonRoot: true
            runAsUser: 10001
            runAsGroup: 10001
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
            seccompProfile:
              type: RuntimeDefault
        {{- end }}
      volumes:
        - name: models
          {{- if eq $storage.type "persistentVolumeClaim" }}
          persistentVolumeClaim:
            claimName: {{ $claim }}
          {{- else }}
          emptyDir:
            {{- with $storage.sizeLimit }}
            sizeLimit: {{ . }}
            {{- end }}
          {{- end }}
        # Shared memory of the tensor-parallel workers (NCCL); the container default is 64 MiB.
        - name: dshm
          emptyDir:
            medium: Memory
            sizeLimit: {{ $d.shmSizeLimit }}
        - name: home
          emptyDir:
            sizeLimit: {{ $d.scratchSizeLimit }}
        - name: tmp
          emptyDir:
            sizeLimit: {{ $d.scratchSizeLimit }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "conductor.componentLabels" $labelArgs | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "conductor.selectorLabels" $labelArgs | nindent 4 }}
  ports:
    - name: http
      port: {{ $d.port }}
      targetPort: http
      protocol: TCP
{{- $pdb := $d.podDisruptionBudget }}
{{- if $pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "conductor.componentLabels" $labelArgs | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" $pdb.minAvailable) }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "conductor.selectorLabels" $labelArgs | nindent 6 }}
{{- end }}
{{- if and (eq $storage.type "persistentVolumeClaim") (not $storage.existingClaim) }}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {{ $claim }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "conductor.componentLabels" $labelArgs | nindent 4 }}
  annotations:
    # Weights are expensive to fetch again: keep the claim when the release is deleted.
    helm.sh/resource-policy: keep
spec:
  accessModes:
    {{- toYaml $storage.accessModes | nindent 4 }}
  {{- with $storage.storageClassName }}
  storageClassName: {{ . }}
  {{- end }}
  resources:
    requests:
      storage: {{ $storage.size }}
{{- end }}
{{- end -}}
