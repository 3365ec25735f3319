{{/*
model.fetch: from SOURCE to the model volume (docs/chart.md "Fetching a model").

- model.source=pvc: a staging Job (job-fetch.yaml) runs `qwen-npu fetch SOURCE <modelDir>` with the
  claim mounted writable; the engine pods' init container `fetch-wait` runs
  `qwen-npu fetch wait <modelDir> --source SOURCE` with the claim read-only: it returns when the
  completion marker of that source and revision exists and every file matches the manifest.
- model.source=hostPath: the node-local cache. The init container `fetch` runs the fetch itself on
  the node's directory (the lock makes a second pod on the node wait and reuse): one fetch per node.
The fetch's lines come from these helpers only; tests/fetch/test_chart.py reads them with the CLI's
own parsers.
*/}}

{{- define "qwen-npu.fetchEnabled" -}}
{{- if .Values.model.fetch.enabled }}true{{- end }}
{{- end }}

{{/* The node-local cache: the pods fetch to their node's hostPath themselves. */}}
{{- define "qwen-npu.fetchNodeLocal" -}}
{{- if and .Values.model.fetch.enabled (eq .Values.model.source "hostPath") }}true{{- end }}
{{- end }}

{{/* Value problems of model.fetch, one per line (job-fetch.yaml fails the render on any). */}}
{{- define "qwen-npu.fetchProblems" -}}
{{- $f := .Values.model.fetch }}
{{- if $f.enabled }}
{{- if not (regexMatch "^(modelscope|hf|s3|obs)://[^ ]+$" $f.source) }}
model.fetch.source {{ $f.source | quote }} is not a SOURCE: use modelscope://org/name, hf://org/name, s3://bucket/prefix or obs://bucket/prefix
{{- end }}
{{- if eq .Values.model.source "image" }}
model.fetch.enabled with model.source=image: an image volume is read-only and already holds its checkpoint; use model.source=pvc (a staging Job fills the claim) or hostPath (a node-local cache)
{{- end }}
{{- if and $f.revision (regexMatch "^(s3|obs)://" $f.source) }}
model.fetch.revision is set for an object store: its revision is the objects' ETags; leave it empty
{{- end }}
{{- if and $f.credentials.keys (not $f.credentials.existingSecret) }}
model.fetch.credentials.keys without model.fetch.credentials.existingSecret: name the Secret that holds those keys
{{- end }}
{{- end }}
{{- end }}

{{/* The staging Job's name: one per source and revision (a Job's template cannot change). */}}
{{- define "qwen-npu.fetchJobName" -}}
{{- $f := .Values.model.fetch }}
{{- $id := printf "%s@%s>%s" $f.source $f.revision (include "qwen-npu.modelDir" .) | sha256sum | trunc 10 }}
{{- printf "%s-fetch" (include "qwen-npu.fullname" .) | trunc 52 | trimSuffix "-" }}-{{ $id }}
{{- end }}

{{/* `qwen-npu fetch` arguments (the Job's and the node-local init container's). */}}
{{- define "qwen-npu.fetchArgs" -}}
{{- $f := .Values.model.fetch }}
- {{ $f.source | quote }}
- {{ include "qwen-npu.modelDir" . | quote }}
{{- with $f.revision }}
- --revision
- {{ . | quote }}
{{- end }}
- --attempts
- {{ $f.attempts | int | toString | quote }}
- --backoff
- {{ $f.backoffSeconds | toString | quote }}
- --read-timeout
- {{ $f.readTimeoutSeconds | toString | quote }}
- --lock-wait
- {{ $f.waitTimeoutSeconds | int | toString | quote }}
{{- if $f.caBundle.configMap }}
- --ca-bundle
- "/etc/qwen-npu/fetch-ca/{{ $f.caBundle.key }}"
{{- end }}
{{- /* The engine pods' preflight init container judges the checkpoint with the engine's settings. */}}
- --no-preflight
{{- range $f.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* `qwen-npu fetch wait` arguments (the engine pods' init container). */}}
{{- define "qwen-npu.fetchWaitArgs" -}}
{{- $f := .Values.model.fetch }}
- wait
- {{ include "qwen-npu.modelDir" . | quote }}
- --source
- {{ $f.source | quote }}
{{- with $f.revision }}
- --revision
- {{ . | quote }}
{{- end }}
- --timeout
- {{ $f.waitTimeoutSeconds | int | toString | quote }}
{{- if not $f.verifySums }}
- --sizes-only
{{- end }}
{{- end }}

{{/* The fetch's environment: where the Secret's files are, mirrors, proxy, writable caches. */}}
{{- define "qwen-npu.fetchEnv" -}}
{{- $f := .Values.model.fetch }}
- name: HOME
  value: /tmp
- name: HF_HOME
  value: /tmp/hf
- name: MODELSCOPE_CACHE
  value: /tmp/modelscope
{{- if $f.credentials.existingSecret }}
- name: QWEN_NPU_FETCH_SECRET
  value: {{ $f.credentials.existingSecret | quote }}
- name: QWEN_NPU_FETCH_SECRET_KEYS
  value: {{ include "qwen-npu.fetchSecretKeys" . | quote }}
- name: QWEN_NPU_FETCH_CREDENTIALS_DIR
  value: /etc/qwen-npu/fetch-credentials
{{- end }}
{{- range $name, $value := $f.mirrors }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- with $f.proxy.https }}
- name: HTTPS_PROXY
  value: {{ . | quote }}
{{- end }}
{{- with $f.proxy.noProxy }}
- name: NO_PROXY
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{- define "qwen-npu.fetchSecretKeys" -}}
{{- $pairs := list }}
{{- range $name, $key := .Values.model.fetch.credentials.keys }}
{{- $pairs = append $pairs (printf "%s=%s" $name $key) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* The fetch container's mounts besides the model volume. */}}
{{- define "qwen-npu.fetchMounts" -}}
{{- $f := .Values.model.fetch }}
- name: fetch-tmp
  mountPath: /tmp
{{- if $f.credentials.existingSecret }}
- name: fetch-credentials
  mountPath: /etc/qwen-npu/fetch-credentials
  readOnly: true
{{- end }}
{{- if $f.caBundle.configMap }}
- name: fetch-ca
  mountPath: /etc/qwen-npu/fetch-ca
  readOnly: true
{{- end }}
{{- end }}

{{- define "qwen-npu.fetchVolumes" -}}
{{- $f := .Values.model.fetch }}
- name: fetch-tmp
  emptyDir:
    sizeLimit: 1Gi
{{- with $f.credentials.existingSecret }}
- name: fetch-credentials
  secret:
    secretName: {{ . | quote }}
    defaultMode: 0440
{{- end }}
{{- with $f.caBundle.configMap }}
- name: fetch-ca
  configMap:
    name: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The fetch container (the Job's, or the node-local init container). Call with the root. */}}
{{- define "qwen-npu.fetchContainer" -}}
- name: fetch
  image: {{ include "qwen-npu.image" (dict "root" . "image" .Values.image.fetch) }}
  imagePullPolicy: {{ .Values.image.fetch.pullPolicy }}
  command:
    - qwen-npu
    - fetch
  args:
    {{- include "qwen-npu.fetchArgs" . | nindent 4 }}
  env:
    {{- include "qwen-npu.fetchEnv" . | nindent 4 }}
  resources:
    {{- toYaml .Values.model.fetch.resources | nindent 4 }}
  securityContext:
    {{- include "qwen-npu.plainSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: model
      mountPath: {{ .Values.model.mountPath }}
    {{- include "qwen-npu.fetchMounts" . | nindent 4 }}
{{- end }}

{{/* The engine pods' wait (engine image: `fetch wait` is standard library only). */}}
{{- define "qwen-npu.fetchWaitContainer" -}}
- name: fetch-wait
  image: {{ include "qwen-npu.image" (dict "root" . "image" .Values.image.engine) }}
  imagePullPolicy: {{ .Values.image.engine.pullPolicy }}
  command:
    - qwen-npu
    - fetch
  args:
    {{- include "qwen-npu.fetchWaitArgs" . | nindent 4 }}
  resources:
    {{- toYaml .Values.preflight.resources | nindent 4 }}
  securityContext:
    {{- include "qwen-npu.plainSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: model
      mountPath: {{ .Values.model.mountPath }}
      readOnly: true
{{- end }}

{{/* The init containers model.fetch adds to an engine pod (before preflight). */}}
{{- define "qwen-npu.fetchInitContainers" -}}
{{- if include "qwen-npu.fetchNodeLocal" . }}
{{- include "qwen-npu.fetchContainer" . }}
{{- else if include "qwen-npu.fetchEnabled" . }}
{{- include "qwen-npu.fetchWaitContainer" . }}
{{- end }}
{{- end }}

{{/* The volumes model.fetch adds to an engine pod (the node-local fetch's). */}}
{{- define "qwen-npu.fetchPodVolumes" -}}
{{- if include "qwen-npu.fetchNodeLocal" . }}
{{- include "qwen-npu.fetchVolumes" . }}
{{- end }}
{{- end }}
