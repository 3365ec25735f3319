{{/*
Shared names, labels, images, the engine command line and the value checks.
Every template calls "qwen-npu.validateValues" (through "qwen-npu.labels") so a bad value fails the
render with a message naming the value and the fix, before anything reaches the cluster.
*/}}

{{/* The chart name, overridable with nameOverride (DNS label: 63 characters). */}}
{{- define "qwen-npu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name prefix of every resource: <release>-<chart>, or the release name when it already
contains the chart name. Truncated to 63 characters (some fields are DNS labels).
*/}}
{{- define "qwen-npu.fullname" -}}
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

{{/* chart-version label value. */}}
{{- define "qwen-npu.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every resource carries. The selector labels are a subset that never changes between
revisions (no version, no image tag, no model): rollbacks never meet an immutable selector.
*/}}
{{- define "qwen-npu.labels" -}}
{{- $_ := include "qwen-npu.validateValues" . -}}
helm.sh/chart: {{ include "qwen-npu.chart" . }}
{{ include "qwen-npu.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: qwen-npu
{{- end }}

{{/* Release-wide selector labels (add app.kubernetes.io/component per workload). */}}
{{- define "qwen-npu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qwen-npu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector of the engine pods (leaders and workers). */}}
{{- define "qwen-npu.engineSelectorLabels" -}}
{{ include "qwen-npu.selectorLabels" . }}
app.kubernetes.io/component: engine
{{- end }}

{{/* Selector of the pods that serve the API: every engine pod, or the LWS leaders. */}}
{{- define "qwen-npu.servingSelectorLabels" -}}
{{ include "qwen-npu.engineSelectorLabels" . }}
qwen-npu.io/role: leader
{{- end }}

{{/* Selector of the router pods. */}}
{{- define "qwen-npu.routerSelectorLabels" -}}
{{ include "qwen-npu.selectorLabels" . }}
app.kubernetes.io/component: router
{{- end }}

{{/* The engine pods' ServiceAccount. */}}
{{- define "qwen-npu.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "qwen-npu.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* "<repository>:<tag>" of one image block; the tag defaults to the chart's appVersion. */}}
{{- define "qwen-npu.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag }}
{{- printf "%s:%s" .image.repository (toString $tag) }}
{{- end }}

{{/* The checkpoint directory as the containers see it. */}}
{{- define "qwen-npu.modelDir" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.model.mountPath) (trimPrefix "/" .Values.model.path) | trimSuffix "/" }}
{{- end }}

{{/* NPUs each engine pod requests: the TP size spread over the nodes. */}}
{{- define "qwen-npu.npusPerPod" -}}
{{- div (int .Values.engine.tpSize) (int .Values.engine.nodes) }}
{{- end }}

{{/* Whether the engine runs as a LeaderWorkerSet (more than one node per replica). */}}
{{- define "qwen-npu.multiNode" -}}
{{- if gt (int .Values.engine.nodes) 1 }}true{{- end }}
{{- end }}

{{/*
The engine's arguments (the image's ENTRYPOINT runs `python3 -m sglang.launch_server "$@"`).
One flag or value per line, in the documented order (docs/chart.md), which is the order of
preflight's builder (qwen_npu.preflight.recommended_args; a test compares them). MTP off drops every
--speculative-* flag. There is deliberately no --speculative-draft-model-quantization: the patches
make the plain command line work.
*/}}
{{- define "qwen-npu.engineArgs" -}}
{{- $e := .Values.engine }}
- --model-path
- {{ include "qwen-npu.modelDir" . | quote }}
- --served-model-name
- {{ .Values.model.name | quote }}
- --device
- {{ $e.device | quote }}
- --attention-backend
- {{ $e.attentionBackend | quote }}
{{- if $e.quantization }}
- --quantization
- {{ $e.quantization | quote }}
{{- end }}
- --tp-size
- {{ $e.tpSize | quote }}
- --mem-fraction-static
- {{ $e.memFractionStatic | quote }}
{{- if $e.graphBatchSizes }}
- --cuda-graph-bs-decode
{{- range $e.graphBatchSizes }}
- {{ . | quote }}
{{- end }}
{{- end }}
{{- if $e.disableRadixCache }}
- --disable-radix-cache
{{- end }}
{{- if $e.trustRemoteCode }}
- --trust-remote-code
{{- end }}
{{- if $e.mambaSsmDtype }}
- --mamba-ssm-dtype
- {{ $e.mambaSsmDtype | quote }}
{{- end }}
{{- if .Values.mtp.enabled }}
- --speculative-algorithm
- {{ .Values.mtp.algorithm | quote }}
- --speculative-num-steps
- {{ .Values.mtp.numSteps | quote }}
- --speculative-eagle-topk
- {{ .Values.mtp.eagleTopk | quote }}
- --speculative-num-draft-tokens
- {{ .Values.mtp.numDraftTokens | quote }}
{{- end }}
- --enable-metrics
- --host
- "0.0.0.0"
- --port
- {{ .Values.service.port | quote }}
{{- if include "qwen-npu.multiNode" . }}
- --nnodes
- "$(LWS_GROUP_SIZE)"
- --node-rank
- "$(LWS_WORKER_INDEX)"
- --dist-init-addr
- {{ printf "$(LWS_LEADER_ADDRESS):%v" .Values.engine.distInitPort | quote }}
{{- end }}
{{- if .Values.apiKey.existingSecret }}
- --api-key
- "$(QWEN_NPU_ENGINE_API_KEY)"
{{- end }}
{{- range $e.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The preflight init container's arguments (its command is `qwen-npu preflight`): the engine's own
settings, so preflight judges the command line the engine will really run (docs/chart.md). Every
value comes from the same key as the engine's flag: TP (engine.tpSize), MTP on/off (mtp.enabled),
the SSM dtype (engine.mambaSsmDtype), the static memory share (engine.memFractionStatic); the HBM per
NPU has no engine flag (preflight.npuMemoryGb). QWEN_NPU_DISABLE_PATCHES and SGLANG_MAMBA_SSM_DTYPE
come through the shared environment ("qwen-npu.engineEnv").
*/}}
{{- define "qwen-npu.preflightArgs" -}}
{{- $e := .Values.engine }}
- {{ include "qwen-npu.modelDir" . | quote }}
- --tp
- {{ $e.tpSize | quote }}
- {{ ternary "--mtp" "--no-mtp" .Values.mtp.enabled }}
- --npu-memory-gb
- {{ .Values.preflight.npuMemoryGb | quote }}
- --mem-fraction-static
- {{ $e.memFractionStatic | quote }}
{{- if $e.mambaSsmDtype }}
- --mamba-ssm-dtype
- {{ $e.mambaSsmDtype | quote }}
{{- end }}
{{- if .Values.preflight.checkShards }}
- --check-shards
{{- end }}
{{- range .Values.preflight.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Flags the chart renders from values: repeating one in an extraArgs list would make the engine and
preflight disagree (argparse keeps the last value), so the checks below reject them, also
abbreviated (argparse accepts any unique prefix) or written `--flag=value`. Maps flag -> the value
to set instead.
*/}}
{{- define "qwen-npu.preflightOwnedFlags" -}}
{{- toJson (dict
  "--tp" "engine.tpSize"
  "--tp-size" "engine.tpSize"
  "--mtp" "mtp.enabled"
  "--no-mtp" "mtp.enabled"
  "--mamba-ssm-dtype" "engine.mambaSsmDtype"
  "--mem-fraction-static" "engine.memFractionStatic"
  "--npu-memory-gb" "preflight.npuMemoryGb"
  "--check-shards" "preflight.checkShards"
) }}
{{- end }}

{{/* Engine flags whose value preflight judges too (see above). */}}
{{- define "qwen-npu.engineOwnedFlags" -}}
{{- toJson (dict
  "--tp-size" "engine.tpSize"
  "--tensor-parallel-size" "engine.tpSize"
  "--mamba-ssm-dtype" "engine.mambaSsmDtype"
  "--mem-fraction-static" "engine.memFractionStatic"
  "--speculative-algorithm" "mtp.enabled and mtp.algorithm"
) }}
{{- end }}

{{/*
Fails when a list of extra flags repeats a flag the chart owns. Call with (dict "args" <list>
"owned" <json of "flag" -> "value"> "key" "<values key of the list>").
*/}}
{{- define "qwen-npu.rejectOwnedFlags" -}}
{{- $owned := fromJson .owned }}
{{- range .args }}
{{- $flag := regexReplaceAll "=.*$" (toString .) "" }}
{{- if and (hasPrefix "--" $flag) (gt (len $flag) 2) }}
{{- range $name, $value := $owned }}
{{- if hasPrefix $flag $name }}
{{- $what := ternary $name (printf "%s (argparse reads it as %s)" $flag $name) (eq $flag $name) }}
{{- fail (printf "%s: %s is a flag the chart renders from %s; remove it from %s and set %s instead (preflight must judge what the engine runs)" $.key $what $value $.key $value) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
checkov skips as metadata annotations: one "CHECK_ID=reason" per entry (helm/qwen-npu/README.md
lists them). Call with a list.
*/}}
{{- define "qwen-npu.checkovSkips" -}}
{{- range $i, $skip := . }}
checkov.io/skip{{ add1 $i }}: {{ $skip | quote }}
{{- end }}
{{- end }}

{{/* Checks the engine workload skips, with the reason. */}}
{{- define "qwen-npu.engineCheckovSkips" -}}
{{- include "qwen-npu.checkovSkips" (list
  "CKV_K8S_11=No CPU limit on the engine on purpose: CFS throttling of the scheduler and tokenizer processes stalls decoding; CPU requests reserve the cores"
  "CKV_K8S_15=Pull policy comes from values (IfNotPresent by default): the engine image is tens of GB and its tag is pinned by docker/versions.env"
  "CKV_K8S_22=SGLang, torch_npu and triton-ascend write kernel and compile caches at run time; the sidecar and preflight run read-only"
  "CKV_K8S_35=SGLang takes the API key only as --api-key, and Kubernetes expands $(VAR) in args only from an environment variable"
  "CKV_K8S_40=The Ascend device files belong to HwHiAiUser (uid/gid 1000 on a standard driver install)"
  "CKV_K8S_43=Images are pinned by tag from docker/versions.env; set image.*.tag to a digest where policy requires it"
) }}
{{- end }}

{{/* A pod security context for the pods that touch no NPU: the sidecar image's high uid/gid. */}}
{{- define "qwen-npu.plainPodSecurityContext" -}}
{{- toYaml (merge (dict "runAsUser" 10001 "runAsGroup" 10001 "fsGroup" 10001) (omit .Values.podSecurityContext "fsGroupChangePolicy")) }}
{{- end }}

{{/* A container security context for those pods. */}}
{{- define "qwen-npu.plainSecurityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* The API key from the existing Secret, as an EnvVar (engine, sidecar, test pod). */}}
{{- define "qwen-npu.apiKeyEnv" -}}
{{- if .Values.apiKey.existingSecret }}
- name: QWEN_NPU_ENGINE_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.apiKey.existingSecret | quote }}
      key: {{ .Values.apiKey.secretKey | quote }}
{{- end }}
{{- end }}

{{/* Where the patches write state.json and the sidecar reads it. */}}
{{- define "qwen-npu.stateDir" -}}
/var/run/qwen-npu
{{- end }}

{{/* Environment shared by the engine and the preflight init container. */}}
{{- define "qwen-npu.engineEnv" -}}
{{- range $name, $value := .Values.engine.ascendEnv }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
- name: QWEN_NPU_STATE_DIR
  value: {{ include "qwen-npu.stateDir" . | quote }}
- name: QWEN_NPU_DISABLE_PATCHES
  value: {{ join "," .Values.patches.disabled | quote }}
{{- if .Values.engine.mambaSsmDtype }}
- name: SGLANG_MAMBA_SSM_DTYPE
  value: {{ .Values.engine.mambaSsmDtype | quote }}
{{- end }}
{{- end }}

{{/* The model volume, from the chosen source. */}}
{{- define "qwen-npu.modelVolume" -}}
- name: model
{{- if eq .Values.model.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ .Values.model.pvc.claimName | quote }}
    readOnly: true
{{- else if eq .Values.model.source "hostPath" }}
  hostPath:
    path: {{ .Values.model.hostPath.path | quote }}
    {{- with .Values.model.hostPath.type }}
    type: {{ . }}
    {{- end }}
{{- else if eq .Values.model.source "image" }}
  image:
    reference: {{ .Values.model.image.reference | quote }}
    pullPolicy: {{ .Values.model.image.pullPolicy }}
{{- end }}
{{- end }}

{{/* Checksum of everything rendered from values that the pods read: a change rolls the pods. */}}
{{- define "qwen-npu.configChecksum" -}}
{{- $inputs := dict "args" (include "qwen-npu.engineArgs" .) "env" (include "qwen-npu.engineEnv" .) "sidecar" .Values.sidecar "apiKey" .Values.apiKey "model" .Values.model "preflight" .Values.preflight }}
{{- toJson $inputs | sha256sum }}
{{- end }}

{{/*
Value checks. Each message names the value to change. Called from "qwen-npu.labels", so any
template that renders reaches it.
*/}}
{{- define "qwen-npu.validateValues" -}}
{{- $tp := int .Values.engine.tpSize }}
{{- $nodes := int .Values.engine.nodes }}
{{- if lt $tp 1 }}
{{- fail "engine.tpSize must be at least 1" }}
{{- end }}
{{- if ne (mod $tp $nodes) 0 }}
{{- fail (printf "engine.tpSize (%d) must be a multiple of engine.nodes (%d): each node runs tpSize/nodes NPUs" $tp $nodes) }}
{{- end }}
{{- $vh := int .Values.model.linearNumValueHeads }}
{{- if ne (mod $vh $tp) 0 }}
{{- fail (printf "engine.tpSize (%d) does not divide model.linearNumValueHeads (%d): pick a TP size that divides the value heads, or fix model.linearNumValueHeads from config.json" $tp $vh) }}
{{- end }}
{{- $kh := int .Values.model.linearNumKeyHeads }}
{{- if and (gt $kh 0) (ne (mod $kh $tp) 0) }}
{{- fail (printf "engine.tpSize (%d) does not divide model.linearNumKeyHeads (%d): pick a TP size that divides the key heads, or fix model.linearNumKeyHeads from config.json" $tp $kh) }}
{{- end }}
{{- $ah := int .Values.model.numAttentionHeads }}
{{- if and (gt $ah 0) (ne (mod $ah $tp) 0) }}
{{- fail (printf "engine.tpSize (%d) does not divide model.numAttentionHeads (%d): pick a TP size that divides the attention heads" $tp $ah) }}
{{- end }}
{{- if eq .Values.updateStrategy.type "RollingUpdate" }}
{{- $surge := toString .Values.updateStrategy.rollingUpdate.maxSurge }}
{{- $unavail := toString .Values.updateStrategy.rollingUpdate.maxUnavailable }}
{{- if and (has $surge (list "0" "0%")) (has $unavail (list "0" "0%")) }}
{{- fail "updateStrategy.rollingUpdate.maxSurge and updateStrategy.rollingUpdate.maxUnavailable are both 0: the rollout could never proceed; set maxUnavailable to 1 (full NPU pool) or use updateStrategy.type=Recreate" }}
{{- end }}
{{- end }}
{{- if eq .Values.model.source "pvc" }}
{{- if not .Values.model.pvc.claimName }}
{{- fail "model.pvc.claimName is empty: name the existing PVC that holds the checkpoint (or set model.source to hostPath or image)" }}
{{- end }}
{{- else if eq .Values.model.source "hostPath" }}
{{- if not .Values.model.hostPath.path }}
{{- fail "model.hostPath.path is empty: set the node directory that holds the checkpoint (or set model.source to pvc or image)" }}
{{- end }}
{{- else if eq .Values.model.source "image" }}
{{- if not .Values.model.image.reference }}
{{- fail "model.image.reference is empty: set the OCI image that holds the checkpoint (or set model.source to pvc or hostPath)" }}
{{- end }}
{{- end }}
{{- if not .Values.model.path }}
{{- fail "model.path is empty: set the checkpoint directory inside the model volume" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail (printf "autoscaling.minReplicas (%d) is above autoscaling.maxReplicas (%d)" (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- end }}
{{- if and .Values.router.enabled (eq (int .Values.replicas) 0) (not .Values.autoscaling.enabled) }}
{{- fail "router.enabled with replicas 0: the router would have no engine; set replicas >= 1" }}
{{- end }}
{{- $_ := include "qwen-npu.rejectOwnedFlags" (dict "args" .Values.preflight.extraArgs "owned" (include "qwen-npu.preflightOwnedFlags" .) "key" "preflight.extraArgs") }}
{{- $_ := include "qwen-npu.rejectOwnedFlags" (dict "args" .Values.engine.extraArgs "owned" (include "qwen-npu.engineOwnedFlags" .) "key" "engine.extraArgs") }}
{{- range $name := list "QWEN_NPU_DISABLE_PATCHES" "SGLANG_MAMBA_SSM_DTYPE" }}
{{- $instead := ternary "patches.disabled" "engine.mambaSsmDtype" (eq $name "QWEN_NPU_DISABLE_PATCHES") }}
{{- if hasKey $.Values.engine.ascendEnv $name }}
{{- fail (printf "engine.ascendEnv sets %s: set %s instead (the chart hands it to the engine and preflight alike)" $name $instead) }}
{{- end }}
{{- range $.Values.engine.extraEnv }}
{{- if eq (toString (get . "name")) $name }}
{{- fail (printf "engine.extraEnv sets %s: set %s instead (the chart hands it to the engine and preflight alike; an extraEnv entry would reach the engine only)" $name $instead) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.mtp.enabled (lt (int .Values.mtp.numDraftTokens) 2) }}
{{- fail "mtp.numDraftTokens must be at least 2 with MTP on (one verified token plus drafts); or set mtp.enabled=false" }}
{{- end }}
{{- end }}
