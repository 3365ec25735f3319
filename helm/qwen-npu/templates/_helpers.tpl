{{/*
Shared names, labels, images and the engine command line. The value checks live in
_validate.tpl and run once, from templates/validate.yaml (not hidden in a helper).
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

{{/*
The name of one of the release's objects: <fullname>-<suffix> (engine, router, canary, ...), the
fullname truncated first so that the whole name fits 63 characters (a DNS label) the Helm way
(`trunc | trimSuffix "-"`): a 53-character release name must not make `<release>-qwen-npu-engine`
64 or more. Call with (list $ "suffix"); every reference to such an object uses the same helper.
*/}}
{{- define "qwen-npu.componentName" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- $base := include "qwen-npu.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base $suffix }}
{{- end }}

{{/* chart-version label value. */}}
{{- define "qwen-npu.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every resource's own metadata carries: the pod-template labels plus the chart and app
versions. The selector labels are a subset that never changes between revisions (no version, no
image tag, no model): rollbacks never meet an immutable selector.
*/}}
{{- define "qwen-npu.labels" -}}
helm.sh/chart: {{ include "qwen-npu.chart" . }}
{{ include "qwen-npu.podTemplateLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/*
Labels of a pod template (add component, role and podLabels there). No chart or app version: a
change to a pod template's labels restarts its pods, and an engine restart reloads the model (up to
engine.startupBudgetSeconds), so a chart bump that only touches a dashboard must not roll them.
What should restart the pods (an image, an argument, a value) changes the template by itself.
*/}}
{{- define "qwen-npu.podTemplateLabels" -}}
{{ include "qwen-npu.selectorLabels" . }}
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

{{- /*
The startup budget is one value, engine.startupBudgetSeconds (docs/chart.md "Probes"): the
kubelet's startup probe, the sidecar's budget and the QwenNpuStartupSlow threshold all read it.
prometheusrule.yaml and configmap-dashboards.yaml fill the ${thresholds.startupBudgetSeconds}
placeholder from "qwen-npu.startupAlertSeconds".
*/}}
{{- define "qwen-npu.startupAlertSeconds" -}}
{{- int .Values.engine.startupBudgetSeconds -}}
{{- end }}

{{/* The engine pods' ServiceAccount. */}}
{{- define "qwen-npu.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "qwen-npu.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
"<repository>:<tag><tagSuffix>[@<digest>]" of one image block; the tag defaults to the chart's
appVersion. tagSuffix picks a chip build of the same version (the A3 engine image is tagged
<version>-a3). global.imageRegistry replaces everything before the repository's last path part
(a site mirror); the block's `digests` pins the rendered tag to the digest `make release` pushed.
*/}}
{{- define "qwen-npu.image" -}}
{{- $tag := printf "%s%s" (toString (default .root.Chart.AppVersion .image.tag)) (toString (default "" .image.tagSuffix)) }}
{{- $repository := .image.repository }}
{{- with (.root.Values.global).imageRegistry }}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) (base $repository) }}
{{- end }}
{{- $digest := get (default dict .image.digests) $tag }}
{{- printf "%s:%s%s" $repository $tag (ternary (printf "@%s" $digest) "" (ne $digest "")) }}
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
The engine's arguments (the image's ENTRYPOINT runs `python3 -m sglang.launch_server "$@"`): the
one place the engine's command line is built. One flag or value per line, in the documented order
(docs/chart.md); the preflight init container gets the same lines after --engine-args and reads
them by SGLang's flag names. MTP off drops every --speculative-* flag.
--speculative-draft-model-quantization only from mtp.draftQuantization (off by default: the patches
make the plain command line work, and `unquant` is wrong for a checkpoint with a quantized MTP).
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
{{- with .Values.mtp.draftQuantization }}
- --speculative-draft-model-quantization
- {{ . | quote }}
{{- end }}
{{- end }}
- --enable-metrics
- --host
- "0.0.0.0"
- --port
- {{ .Values.service.port | quote }}
{{- include "qwen-npu.recipeArgs" . }}
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
The profile's recipe flags (SGLang's Ascend recipes; each profile names its sources beside its
values), after the common part of the command line: dtype, chunked prefill, prefill budget,
multimodal, the parsers. Each is omitted at its empty value, so SGLang's default applies.
*/}}
{{- define "qwen-npu.recipeArgs" -}}
{{- $e := .Values.engine }}
{{- with $e.dtype }}
- --dtype
- {{ . | quote }}
{{- end }}
{{- if ne (int $e.chunkedPrefillSize) 0 }}
- --chunked-prefill-size
- {{ int $e.chunkedPrefillSize | quote }}
{{- end }}
{{- if gt (int $e.maxPrefillTokens) 0 }}
- --max-prefill-tokens
- {{ int $e.maxPrefillTokens | quote }}
{{- end }}
{{- if $e.enableMultimodal }}
- --enable-multimodal
{{- end }}
{{- with $e.mmAttentionBackend }}
- --mm-attention-backend
- {{ . | quote }}
{{- end }}
{{- with $e.reasoningParser }}
- --reasoning-parser
- {{ . | quote }}
{{- end }}
{{- with $e.toolCallParser }}
- --tool-call-parser
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The preflight init container's arguments (its command is `qwen-npu preflight`): its own settings,
then `--engine-args` and the engine's arguments exactly as "qwen-npu.engineArgs" renders them, so
preflight judges the command line the engine will really run (TP, SSM dtype, speculative flags,
quantization, memory share: docs/chart.md). Only what has no engine flag is preflight's own: the HBM
per NPU (preflight.npuMemoryGb), the shard check, preflight.extraArgs. The chip
(QWEN_NPU_CHIP), QWEN_NPU_DISABLE_PATCHES and SGLANG_MAMBA_SSM_DTYPE come through the shared
environment ("qwen-npu.engineEnv").
*/}}
{{- define "qwen-npu.preflightArgs" -}}
- --npu-memory-gb
- {{ .Values.preflight.npuMemoryGb | quote }}
{{- if .Values.preflight.checkShards }}
- --check-shards
{{- end }}
{{- range .Values.preflight.extraArgs }}
- {{ . | quote }}
{{- end }}
- --engine-args
{{- include "qwen-npu.engineArgs" . }}
{{- end }}

{{/*
Flags the chart renders from values: repeating one in engine.extraArgs would override the value
(argparse keeps the last one), and preflight refuses its own engine flags beside --engine-args
(exit 2), so the checks below reject them at render time, also abbreviated (argparse accepts any
unique prefix) or written `--flag=value`. Maps flag -> the value to set instead.
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
  "--chip" "npu.chip"
  "--engine-args" "the engine's values (the chart passes the engine's command line last)"
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
  "--speculative-num-draft-tokens" "mtp.numDraftTokens"
  "--speculative-draft-model-quantization" "mtp.draftQuantization"
) }}
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
{{- $skips := list
  "CKV_K8S_15=Pull policy comes from values (IfNotPresent by default): the engine image is tens of GB and its tag is pinned by docker/versions.env"
  "CKV_K8S_22=SGLang, torch_npu and triton-ascend write kernel and compile caches at run time; the sidecar and preflight run read-only"
  "CKV_K8S_35=SGLang takes the API key only as --api-key, and Kubernetes expands $(VAR) in args only from an environment variable"
  "CKV_K8S_40=The Ascend device files belong to HwHiAiUser (uid/gid 1000 on a standard driver install)"
  "CKV_K8S_43=Images are pinned by tag from docker/versions.env; set image.*.tag to a digest where policy requires it"
}}
{{- if not (get (default (dict) (get .Values.engine.resources "limits")) "cpu") }}
{{- $skips = prepend $skips "CKV_K8S_11=No CPU limit on the engine on purpose: CFS throttling of the scheduler and tokenizer processes stalls decoding; CPU requests reserve the cores (a Guaranteed pod with whole CPUs sets one: docs/chart.md)" }}
{{- end }}
{{- if .Values.network.hostNetwork }}
{{- $skips = append $skips "CKV_K8S_19=network.hostNetwork is an explicit opt-in for pools whose RoCE NICs HCCL needs; docs/chart.md lists what it does to ports and NetworkPolicy" }}
{{- end }}
{{- include "qwen-npu.checkovSkips" $skips }}
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

{{/*
The engine image's HOME (its ENV HOME, docker/engine.Dockerfile; a test pins the two equal): CANN's
logs, operator cache and work files and the compiler caches live under it, so an emptyDir there
makes them writable for any uid (engine.securityContext.runAsUser need not exist in the image).
*/}}
{{- define "qwen-npu.engineHome" -}}
/var/lib/qwen-npu/home
{{- end }}

{{/*
HCCL_SOCKET_IFNAME: the value, else `lo` on one node (SGLang's Ascend recipes); several nodes need
the value (a check fails without it). GLOO_SOCKET_IFNAME defaults to the same interface.
*/}}
{{- define "qwen-npu.hcclSocketIfname" -}}
{{- default (ternary "" "lo" (gt (int .Values.engine.nodes) 1)) .Values.network.hcclSocketIfname }}
{{- end }}

{{- define "qwen-npu.glooSocketIfname" -}}
{{- default (include "qwen-npu.hcclSocketIfname" .) .Values.network.glooSocketIfname }}
{{- end }}

{{/*
Whether the engine pod gets an exclusive cpuset from the kubelet's static CPU manager: the pod is
Guaranteed (every container, init containers included, has CPU and memory limits equal to its
requests) and the engine asks for whole CPUs. Prints "true" or nothing.
*/}}
{{- define "qwen-npu.containerGuaranteed" -}}
{{- $req := default (dict) (get . "requests") }}
{{- $lim := default (dict) (get . "limits") }}
{{- $ok := true }}
{{- range $r := list "cpu" "memory" }}
{{- if not (hasKey $lim $r) }}
{{- $ok = false }}
{{- else if and (hasKey $req $r) (ne (toString (get $req $r)) (toString (get $lim $r))) }}
{{- $ok = false }}
{{- end }}
{{- end }}
{{- if $ok }}true{{- end }}
{{- end }}

{{- define "qwen-npu.exclusiveCpus" -}}
{{- $v := .Values }}
{{- $ok := and (include "qwen-npu.containerGuaranteed" $v.engine.resources) (include "qwen-npu.containerGuaranteed" $v.sidecar.resources) }}
{{- if $v.preflight.enabled }}
{{- $ok = and $ok (include "qwen-npu.containerGuaranteed" $v.preflight.resources) }}
{{- end }}
{{- $cpu := toString (get (default (dict) (get $v.engine.resources "limits")) "cpu") }}
{{- if and $ok (regexMatch "^[0-9]+$" $cpu) }}true{{- end }}
{{- end }}

{{/* SGLANG_SET_CPU_AFFINITY on: "on", or "auto" when the pod has an exclusive cpuset. */}}
{{- define "qwen-npu.cpuAffinity" -}}
{{- $mode := .Values.engine.cpuAffinity }}
{{- if or (eq $mode "on") (and (eq $mode "auto") (include "qwen-npu.exclusiveCpus" .)) }}true{{- end }}
{{- end }}

{{/*
Seconds the longest request may take at the profile's limits (engine.drain): the time to its first
token plus maxOutputTokens at the worst time per output token, rounded up.
*/}}
{{- define "qwen-npu.longestRequestSeconds" -}}
{{- $d := .Values.engine.drain }}
{{- int (ceil (addf (float64 $d.worstTtftSeconds) (mulf (float64 $d.maxOutputTokens) (float64 $d.worstTpotSeconds)))) }}
{{- end }}

{{/*
The drain of one engine pod, in seconds: the preStop pause (the router and the Service stop
sending), the longest request, SGLang's exit (its watchdog looks every 5 s, then the processes go).
*/}}
{{- define "qwen-npu.drainSeconds" -}}
{{- $d := .Values.engine.drain }}
{{- add (int $d.preStopSeconds) (int (include "qwen-npu.longestRequestSeconds" .)) (int $d.exitSeconds) }}
{{- end }}

{{/* terminationGracePeriodSeconds of the engine pods: the value, or the drain when it is 0. */}}
{{- define "qwen-npu.engineGraceSeconds" -}}
{{- $grace := int .Values.engine.terminationGracePeriodSeconds }}
{{- if gt $grace 0 }}{{ $grace }}{{ else }}{{ include "qwen-npu.drainSeconds" . }}{{ end }}
{{- end }}

{{/* Environment shared by the engine and the preflight init container. */}}
{{- define "qwen-npu.engineEnv" -}}
{{- range $name, $value := .Values.engine.ascendEnv }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- with include "qwen-npu.hcclSocketIfname" . }}
- name: HCCL_SOCKET_IFNAME
  value: {{ . | quote }}
{{- end }}
{{- with include "qwen-npu.glooSocketIfname" . }}
- name: GLOO_SOCKET_IFNAME
  value: {{ . | quote }}
{{- end }}
{{- if and (include "qwen-npu.multiNode" .) .Values.network.hcclIfIpFromPodIp }}
- name: HCCL_IF_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- /* Always rendered: the image bakes none, and SGLang's own default may change. */}}
- name: SGLANG_SET_CPU_AFFINITY
  value: {{ if include "qwen-npu.cpuAffinity" . }}"1"{{ else }}"0"{{ end }}
- name: QWEN_NPU_CHIP
  value: {{ .Values.npu.chip | quote }}
- name: QWEN_NPU_EXPECTED_NPUS
  value: {{ include "qwen-npu.npusPerPod" . | quote }}
- name: QWEN_NPU_STATE_DIR
  value: {{ include "qwen-npu.stateDir" . | quote }}
- name: QWEN_NPU_DISABLE_PATCHES
  value: {{ join "," .Values.patches.disabled | quote }}
- name: QWEN_NPU_GDN_DECODE_ROUTE
  value: {{ .Values.patches.gdnDecodeRoute | quote }}
{{- /* The driver check (entrypoint and preflight): where version.info is, the label to name. */}}
- name: QWEN_NPU_DRIVER_VERSION_FILE
  value: {{ .Values.npu.driverVersionFile | quote }}
- name: QWEN_NPU_HDK_NODE_LABEL
  value: {{ .Values.scheduling.driverVersion.nodeLabel | quote }}
{{- if .Values.engine.mambaSsmDtype }}
- name: SGLANG_MAMBA_SSM_DTYPE
  value: {{ .Values.engine.mambaSsmDtype | quote }}
{{- end }}
{{- end }}

{{/*
The engine pods' securityContext: podSecurityContext plus npu.deviceGroupId in supplementalGroups
(the group that owns /dev/davinci*: the engine runs as a non-root uid with every capability dropped).
*/}}
{{- define "qwen-npu.enginePodSecurityContext" -}}
{{- $sc := deepCopy (default (dict) .Values.podSecurityContext) }}
{{- $gid := int .Values.npu.deviceGroupId }}
{{- if gt $gid 0 }}
{{- $groups := default (list) (get $sc "supplementalGroups") }}
{{- $seen := false }}
{{- range $groups }}
{{- if eq (int .) $gid }}
{{- $seen = true }}
{{- end }}
{{- end }}
{{- if not $seen }}
{{- $groups = append $groups $gid }}
{{- end }}
{{- $_ := set $sc "supplementalGroups" $groups }}
{{- end }}
{{- toYaml $sc }}
{{- end }}

{{/*
The engine pods' affinity: scheduling.affinity, plus, required in every node-selector term, (1)
with scheduling.driverVersion.values the node label stating a supported driver, (2) with
scheduling.superPod.spBlock > 0 (the sp-block placement only an Atlas 900 A3 SuperPoD has) the
label MindCluster gives its nodes, `accelerator-type: module-a3-16-super-pod` (an Atlas 800 A3 /
A200T A3 Box8 server carries `module-a3-16`; chips/a3.yaml admits both; docs/chart.md).
*/}}
{{- define "qwen-npu.engineAffinity" -}}
{{- $aff := deepCopy (default (dict) .Values.scheduling.affinity) }}
{{- $d := .Values.scheduling.driverVersion }}
{{- $exprs := list }}
{{- if $d.values }}
{{- $exprs = append $exprs (dict "key" $d.nodeLabel "operator" "In" "values" $d.values) }}
{{- end }}
{{- if gt (int .Values.scheduling.superPod.spBlock) 0 }}
{{- $exprs = append $exprs (dict "key" "accelerator-type" "operator" "In" "values" (list "module-a3-16-super-pod")) }}
{{- end }}
{{- if $exprs }}
{{- $node := default (dict) (get $aff "nodeAffinity") }}
{{- $req := default (dict) (get $node "requiredDuringSchedulingIgnoredDuringExecution") }}
{{- $terms := default (list) (get $req "nodeSelectorTerms") }}
{{- if not $terms }}
{{- $terms = list (dict) }}
{{- end }}
{{- $out := list }}
{{- range $terms }}
{{- $t := deepCopy . }}
{{- $_ := set $t "matchExpressions" (concat (default (list) (get $t "matchExpressions")) $exprs) }}
{{- $out = append $out $t }}
{{- end }}
{{- $_ := set $req "nodeSelectorTerms" $out }}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $req }}
{{- $_ := set $aff "nodeAffinity" $node }}
{{- end }}
{{- if $aff }}
{{- toYaml $aff }}
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
The router's arguments (after `python3 -m sglang_router.launch_router`, the pinned sglang-router;
`smg launch` takes the same): one flag or value per line. The one builder of the router's command
line: `make failover` (tools/proofs/failover.py) renders it and only swaps the service discovery flags for
its local workers' URLs; tests/helm/test_drain_router.py checks every flag against the pinned
router's `--help`.
*/}}
{{- define "qwen-npu.routerArgs" -}}
{{- $r := .Values.router }}
- --host
- "0.0.0.0"
- --port
- {{ .Values.service.port | quote }}
- --policy
- {{ $r.policy | quote }}
- --service-discovery
- --selector
{{- range $key, $value := fromYaml (include "qwen-npu.servingSelectorLabels" .) }}
- {{ printf "%s=%s" $key $value | quote }}
{{- end }}
- --service-discovery-port
- {{ .Values.service.port | quote }}
- --service-discovery-namespace
- {{ .Release.Namespace | quote }}
- --health-check-endpoint
- {{ $r.healthCheck.endpoint | quote }}
- --health-check-interval-secs
- {{ $r.healthCheck.intervalSecs | int | toString | quote }}
- --health-check-timeout-secs
- {{ $r.healthCheck.timeoutSecs | int | toString | quote }}
- --health-failure-threshold
- {{ $r.healthCheck.failureThreshold | int | toString | quote }}
- --health-success-threshold
- {{ $r.healthCheck.successThreshold | int | toString | quote }}
- --retry-max-retries
- {{ $r.retry.maxRetries | int | toString | quote }}
- --retry-initial-backoff-ms
- {{ $r.retry.initialBackoffMs | int | toString | quote }}
- --retry-max-backoff-ms
- {{ $r.retry.maxBackoffMs | int | toString | quote }}
- --retry-backoff-multiplier
- {{ $r.retry.backoffMultiplier | toString | quote }}
- --retry-jitter-factor
- {{ $r.retry.jitterFactor | toString | quote }}
- --cb-failure-threshold
- {{ $r.circuitBreaker.failureThreshold | int | toString | quote }}
- --cb-success-threshold
- {{ $r.circuitBreaker.successThreshold | int | toString | quote }}
- --cb-timeout-duration-secs
- {{ $r.circuitBreaker.timeoutDurationSecs | int | toString | quote }}
- --cb-window-duration-secs
- {{ $r.circuitBreaker.windowDurationSecs | int | toString | quote }}
- --prometheus-host
- "0.0.0.0"
- --prometheus-port
- {{ $r.metricsPort | int | toString | quote }}
- --request-timeout-secs
- {{ $r.requestTimeoutSecs | int | toString | quote }}
- --shutdown-grace-period-secs
- {{ $r.shutdownGracePeriodSecs | int | toString | quote }}
{{- if .Values.apiKey.existingSecret }}
- --api-key
- "$(QWEN_NPU_ENGINE_API_KEY)"
{{- end }}
{{- range $r.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* A generated PromQL query with its ${...} placeholders filled: (dict "query" q "fill" map). */}}
{{- define "qwen-npu.fillQuery" -}}
{{- $q := .query }}
{{- range $placeholder, $value := .fill }}
{{- $q = replace $placeholder (toString $value) $q }}
{{- end }}
{{- $q }}
{{- end }}

{{/* "true" when the router mounts the model volume (router.mountModel; auto = the pvc source). */}}
{{- define "qwen-npu.routerMountsModel" -}}
{{- $m := toString .Values.router.mountModel }}
{{- if or (eq $m "true") (and (eq $m "auto") (eq .Values.model.source "pvc")) }}true{{ end }}
{{- end }}

