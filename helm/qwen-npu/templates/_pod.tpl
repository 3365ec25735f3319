{{/*
The engine pod, shared by the Deployment (role "single") and the LeaderWorkerSet ("leader",
"worker"). Call with (dict "root" $ "role" "single|leader|worker").

- preflight init container: `qwen-npu preflight <model dir>` in the engine image with the engine's
  settings ("qwen-npu.preflightArgs") and environment, so a checkpoint that would fail stops the
  pod in seconds;
- engine: SGLang with the rendered command line; the kubelet probes the sidecar's /startupz,
  /readyz and /livez on the sidecar port (the sidecar judges the engine from cached state);
- sidecar (serving pods only): metrics, probes, canary; reads the patches' state.json from the
  shared emptyDir.
Workers of a multi-node group run the engine only (SGLang serves HTTP from node rank 0).
*/}}
{{- define "qwen-npu.enginePodTemplate" -}}
{{- $root := .root }}
{{- $role := .role }}
{{- $v := $root.Values }}
{{- $serving := ne $role "worker" }}
metadata:
  labels:
    {{- include "qwen-npu.labels" $root | nindent 4 }}
    app.kubernetes.io/component: engine
    qwen-npu.io/role: {{ ternary "worker" "leader" (eq $role "worker") }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include "qwen-npu.configChecksum" $root }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "qwen-npu.serviceAccountName" $root }}
  automountServiceAccountToken: {{ $v.serviceAccount.automountServiceAccountToken }}
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ $v.engine.terminationGracePeriodSeconds }}
  {{- if $v.scheduling.volcano }}
  schedulerName: volcano
  {{- else if $v.scheduling.schedulerName }}
  schedulerName: {{ $v.scheduling.schedulerName }}
  {{- end }}
  {{- with $v.scheduling.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $v.scheduling.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  {{- with $v.image.pullSecrets }}
  imagePullSecrets:
    {{- range . }}
    - name: {{ . }}
    {{- end }}
  {{- end }}
  {{- with $v.scheduling.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.scheduling.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.scheduling.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $v.preflight.enabled }}
  initContainers:
    - name: preflight
      image: {{ include "qwen-npu.image" (dict "root" $root "image" $v.image.engine) }}
      imagePullPolicy: {{ $v.image.engine.pullPolicy }}
      command:
        - qwen-npu
        - preflight
      args:
        {{- include "qwen-npu.preflightArgs" $root | nindent 8 }}
      env:
        {{- include "qwen-npu.engineEnv" $root | nindent 8 }}
      resources:
        {{- toYaml $v.preflight.resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        - name: model
          mountPath: {{ $v.model.mountPath }}
          readOnly: true
  {{- end }}
  containers:
    - name: engine
      image: {{ include "qwen-npu.image" (dict "root" $root "image" $v.image.engine) }}
      imagePullPolicy: {{ $v.image.engine.pullPolicy }}
      args:
        {{- include "qwen-npu.engineArgs" $root | nindent 8 }}
      env:
        {{- include "qwen-npu.engineEnv" $root | nindent 8 }}
        {{- include "qwen-npu.apiKeyEnv" $root | nindent 8 }}
        {{- with $v.engine.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if $serving }}
      ports:
        - name: http
          containerPort: {{ $v.service.port }}
          protocol: TCP
        {{- if include "qwen-npu.multiNode" $root }}
        - name: dist-init
          containerPort: {{ $v.engine.distInitPort }}
          protocol: TCP
        {{- end }}
      {{- /* The budget covers weight loading and graph capture: failureThreshold x period. */}}
      startupProbe:
        httpGet:
          path: /startupz
          port: {{ $v.sidecar.port }}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: {{ add (div (int $v.engine.startupBudgetSeconds) 10) 1 }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: {{ $v.sidecar.port }}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 3
      livenessProbe:
        httpGet:
          path: /livez
          port: {{ $v.sidecar.port }}
        periodSeconds: 20
        timeoutSeconds: 5
        failureThreshold: {{ $v.engine.livenessFailureThreshold }}
      {{- end }}
      resources:
        {{- $npu := dict $v.scheduling.npuResource (include "qwen-npu.npusPerPod" $root) }}
        {{- $res := deepCopy $v.engine.resources }}
        {{- $requests := merge (default (dict) (get $res "requests")) $npu }}
        {{- $limits := merge (default (dict) (get $res "limits")) $npu }}
        {{- toYaml (dict "requests" $requests "limits" $limits) | nindent 8 }}
      securityContext:
        {{- toYaml $v.engine.securityContext | nindent 8 }}
      volumeMounts:
        - name: model
          mountPath: {{ $v.model.mountPath }}
          readOnly: true
        - name: dshm
          mountPath: /dev/shm
        - name: state
          mountPath: {{ include "qwen-npu.stateDir" $root }}
    {{- if $serving }}
    - name: sidecar
      image: {{ include "qwen-npu.image" (dict "root" $root "image" $v.image.sidecar) }}
      imagePullPolicy: {{ $v.image.sidecar.pullPolicy }}
      command:
        - qwen-npu
        - sidecar
      env:
        - name: QWEN_NPU_ENGINE_URL
          value: {{ printf "http://127.0.0.1:%v" $v.service.port | quote }}
        - name: QWEN_NPU_SIDECAR_PORT
          value: {{ $v.sidecar.port | quote }}
        - name: QWEN_NPU_STATE_DIR
          value: {{ include "qwen-npu.stateDir" $root | quote }}
        - name: QWEN_NPU_MODEL_DIR
          value: {{ include "qwen-npu.modelDir" $root | quote }}
        - name: QWEN_NPU_TP_SIZE
          value: {{ $v.engine.tpSize | quote }}
        {{- with $v.engine.mambaSsmDtype }}
        - name: QWEN_NPU_MAMBA_SSM_DTYPE
          value: {{ . | quote }}
        {{- end }}
        - name: QWEN_NPU_CANARY_INTERVAL_S
          value: {{ $v.sidecar.canaryIntervalSeconds | quote }}
        {{- if $v.sidecar.canaryGolden }}
        - name: QWEN_NPU_CANARY_GOLDEN_FILE
          value: /etc/qwen-npu/canary/golden.txt
        {{- end }}
        - name: QWEN_NPU_STARTUP_BUDGET_S
          value: {{ $v.engine.startupBudgetSeconds | quote }}
        - name: QWEN_NPU_LIVENESS_FAILURES
          value: {{ $v.engine.livenessFailureThreshold | quote }}
        {{- include "qwen-npu.apiKeyEnv" $root | nindent 8 }}
        {{- with $v.sidecar.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: sidecar
          containerPort: {{ $v.sidecar.port }}
          protocol: TCP
      {{- /* The sidecar's own health: its port answers. /livez judges the engine, not the sidecar. */}}
      livenessProbe:
        tcpSocket:
          port: {{ $v.sidecar.port }}
        periodSeconds: 20
        timeoutSeconds: 5
        failureThreshold: 3
      readinessProbe:
        tcpSocket:
          port: {{ $v.sidecar.port }}
        periodSeconds: 10
        timeoutSeconds: 5
      resources:
        {{- toYaml $v.sidecar.resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        - name: state
          mountPath: {{ include "qwen-npu.stateDir" $root }}
          readOnly: true
        - name: model
          mountPath: {{ $v.model.mountPath }}
          readOnly: true
        - name: tmp
          mountPath: /tmp
        {{- if $v.sidecar.canaryGolden }}
        - name: canary
          mountPath: /etc/qwen-npu/canary
          readOnly: true
        {{- end }}
    {{- end }}
  volumes:
    {{- include "qwen-npu.modelVolume" $root | nindent 4 }}
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $v.engine.shmSizeLimit }}
    - name: state
      emptyDir:
        sizeLimit: 64Mi
    - name: tmp
      emptyDir:
        sizeLimit: 256Mi
    {{- if $v.sidecar.canaryGolden }}
    - name: canary
      configMap:
        name: {{ include "qwen-npu.fullname" $root }}-canary
    {{- end }}
{{- end }}
