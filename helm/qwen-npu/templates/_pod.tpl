{{/*
The engine pod, shared by the Deployment (role "single") and the LeaderWorkerSet ("leader",
"worker"). Call with (dict "root" $ "role" "single|leader|worker").

- preflight init container: `qwen-npu preflight ... --engine-args <the engine's arguments>` in the
  engine image ("qwen-npu.preflightArgs") with the engine's environment, so a checkpoint or a
  command line that would fail stops the pod in seconds;
- sidecar (serving pods only): metrics, probes, canary; reads the patches' state.json from the
  shared emptyDir. A native sidecar (an init container with restartPolicy Always, Kubernetes 1.29+):
  it starts before the engine and the kubelet stops it only after the engine has exited, so it
  keeps answering the probes through the whole drain;
- engine: SGLang with the rendered command line; the kubelet probes the sidecar's /startupz,
  /readyz and /livez on the sidecar port (the sidecar judges the engine from cached state).
Drain on deletion (docs/chart.md "Drain"): the pod leaves the Service endpoints and the router's
worker list as soon as it is marked for deletion; the engine's preStop pauses
engine.drain.preStopSeconds so both have acted; then SIGTERM: SGLang answers 503 on /health,
finishes in-flight requests and exits; then the sidecar stops. terminationGracePeriodSeconds covers
all of it (computed from engine.drain, or checked against it).
Workers of a multi-node group run the engine only (SGLang serves HTTP from node rank 0).
*/}}
{{- define "qwen-npu.enginePodTemplate" -}}
{{- $root := .root }}
{{- $role := .role }}
{{- $v := $root.Values }}
{{- $serving := ne $role "worker" }}
metadata:
  labels:
    {{- include "qwen-npu.podTemplateLabels" $root | nindent 4 }}
    app.kubernetes.io/component: engine
    qwen-npu.io/role: {{ ternary "worker" "leader" (eq $role "worker") }}
    {{- with $v.scheduling.faultRescheduling }}
    {{- if .enabled }}
    {{- /* MindCluster's fault rescheduling reads these labels off the pod (docs/chart.md). */}}
    fault-scheduling: {{ .mode | quote }}
    fault-retry-times: {{ .retryTimes | toString | quote }}
    pod-rescheduling: {{ ternary "on" "off" .podLevel | quote }}
    ring-controller.atlas: ascend-910b
    {{- end }}
    {{- end }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include "qwen-npu.configChecksum" $root }}
    {{- if gt (int $v.scheduling.superPod.spBlock) 0 }}
    {{- /* Atlas A3 SuperPoD: place the group's NPUs inside blocks of this many chips. */}}
    sp-block: {{ $v.scheduling.superPod.spBlock | toString | quote }}
    {{- end }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "qwen-npu.serviceAccountName" $root }}
  automountServiceAccountToken: {{ $v.serviceAccount.automountServiceAccountToken }}
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ include "qwen-npu.engineGraceSeconds" $root }}
  {{- if $v.network.hostNetwork }}
  {{- /* The node's network namespace (RoCE NICs): every port below opens on the node. */}}
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
  {{- end }}
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
  {{- with include "qwen-npu.engineAffinity" $root }}
  affinity:
    {{- . | nindent 4 }}
  {{- end }}
  {{- with include "qwen-npu.enginePodSecurityContext" $root }}
  securityContext:
    {{- . | nindent 4 }}
  {{- end }}
  {{- if or $v.preflight.enabled $serving (include "qwen-npu.fetchEnabled" $root) }}
  initContainers:
  {{- end }}
  {{- /* model.fetch (_fetch.tpl): wait for the staging Job's marker, or fetch to the node. */}}
  {{- with include "qwen-npu.fetchInitContainers" $root }}
    {{- . | nindent 4 }}
  {{- end }}
  {{- if $v.preflight.enabled }}
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
        {{- /* Only the driver's version.info, for preflight's driver check (no NPU, no library):
        this container requests no NPU, so no runtime injects anything into it. */}}
        {{- if eq $v.npu.runtime "hostPath" }}
        - name: ascend-driver
          mountPath: {{ $v.npu.driverVersionFile }}
          subPath: version.info
          readOnly: true
        {{- else }}
        - name: ascend-driver-version
          mountPath: {{ $v.npu.driverVersionFile }}
          readOnly: true
        {{- end }}
  {{- end }}
    {{- if $serving }}
    - name: sidecar
      image: {{ include "qwen-npu.image" (dict "root" $root "image" $v.image.sidecar) }}
      imagePullPolicy: {{ $v.image.sidecar.pullPolicy }}
      {{- /* A native sidecar: runs beside the engine, stopped only after the engine exited. */}}
      restartPolicy: Always
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
      {{- with $v.sidecar.extraEnvFrom }}
      envFrom:
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
        {{- with $v.sidecar.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
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
      {{- with $v.engine.extraEnvFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $serving }}
      {{- /* Drain: a pause before SIGTERM so the router and the Service have stopped sending. */}}
      lifecycle:
        preStop:
          exec:
            command:
              - sleep
              - {{ $v.engine.drain.preStopSeconds | int | toString | quote }}
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
      {{- /* The sidecar already waited for engine.livenessFailureThreshold failed engine probes:
      the kubelet only relays /livez, with 2 failures so a sidecar restart alone never restarts
      the engine. Dead engine to restart: docs/chart.md "Probes" (checked by a test). */}}
      livenessProbe:
        httpGet:
          path: /livez
          port: {{ $v.sidecar.port }}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 2
      {{- end }}
      resources:
        {{- $npu := dict $v.scheduling.npuResource (include "qwen-npu.npusPerPod" $root) }}
        {{- $res := deepCopy $v.engine.resources }}
        {{- $requests := merge (default (dict) (get $res "requests")) $npu }}
        {{- $limits := merge (default (dict) (get $res "limits")) $npu }}
        {{- toYaml (dict "requests" $requests "limits" $limits) | nindent 8 }}
      securityContext:
        {{- $sc := deepCopy $v.engine.securityContext }}
        {{- if and (eq $v.npu.runtime "hostPath") $v.npu.hostPath.privileged }}
        {{- /* privileged with allowPrivilegeEscalation false is rejected by the API server */}}
        {{- $_ := set $sc "privileged" true }}
        {{- $_ := set $sc "allowPrivilegeEscalation" true }}
        {{- end }}
        {{- toYaml $sc | nindent 8 }}
      volumeMounts:
        - name: model
          mountPath: {{ $v.model.mountPath }}
          readOnly: true
        - name: dshm
          mountPath: /dev/shm
        - name: state
          mountPath: {{ include "qwen-npu.stateDir" $root }}
        - name: engine-home
          mountPath: {{ include "qwen-npu.engineHome" $root }}
        {{- /* The pod's annotations: the entrypoint reads the device plugin's huawei.com/AscendReal. */}}
        - name: podinfo
          mountPath: /etc/qwen-npu/podinfo
          readOnly: true
        {{- include "qwen-npu.npuMounts" $root | nindent 8 }}
        {{- with $v.engine.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    {{- include "qwen-npu.modelVolume" $root | nindent 4 }}
    {{- with include "qwen-npu.fetchPodVolumes" $root }}
    {{- . | nindent 4 }}
    {{- end }}
    - name: podinfo
      downwardAPI:
        items:
          - path: annotations
            fieldRef:
              fieldPath: metadata.annotations
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $v.engine.shmSizeLimit }}
    - name: state
      emptyDir:
        sizeLimit: 64Mi
    - name: engine-home
      emptyDir:
        sizeLimit: {{ $v.engine.homeSizeLimit }}
    - name: tmp
      emptyDir:
        sizeLimit: 256Mi
    {{- if $v.sidecar.canaryGolden }}
    - name: canary
      configMap:
        name: {{ include "qwen-npu.componentName" (list $root "canary") }}
    {{- end }}
    {{- include "qwen-npu.npuVolumes" $root | nindent 4 }}
    {{- with $v.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/*
Host files the engine needs beyond the NPUs the device plugin hands out. npu.runtime=hostPath
(pools without the Ascend Docker Runtime): the driver, DCMI, npu-smi and the install info; no device
nodes (a mounted device node is not in the container's device allow-list: the device plugin's
DeviceSpecs or npu.hostPath.privileged give access); npu.runtime=ascend-docker-runtime: the driver's
version.info alone (hostPath type File: a node without it does not start the pod, the event names
the path); network.hccnConf: the node's /etc/hccn.conf
(the NICs HCCL uses). Mount names and paths come in pairs from "qwen-npu.npuHostFiles".
*/}}
{{- define "qwen-npu.npuHostFiles" -}}
{{- $v := .Values }}
{{- $files := list }}
{{- if eq $v.npu.runtime "hostPath" }}
{{- $h := $v.npu.hostPath }}
{{- $files = append $files (dict "name" "ascend-driver" "path" $h.driverPath "type" "Directory") }}
{{- with $h.dcmiPath }}
{{- $files = append $files (dict "name" "ascend-dcmi" "path" . "type" "Directory") }}
{{- end }}
{{- with $h.npuSmiPath }}
{{- $files = append $files (dict "name" "ascend-npu-smi" "path" . "type" "File") }}
{{- end }}
{{- with $h.installInfoPath }}
{{- $files = append $files (dict "name" "ascend-install-info" "path" . "type" "File") }}
{{- end }}
{{- else }}
{{- /* The Ascend Docker Runtime mounts driver/lib64 and include, never driver/version.info (and
ASCEND_RUNTIME_MOUNTS cannot add it): the node's file, read-only, for the entrypoint's driver check. */}}
{{- $files = append $files (dict "name" "ascend-driver-version" "path" $v.npu.driverVersionFile "type" "File") }}
{{- end }}
{{- if $v.network.hccnConf.enabled }}
{{- $files = append $files (dict "name" "hccn-conf" "path" $v.network.hccnConf.path "type" "File") }}
{{- end }}
{{- toJson $files }}
{{- end }}

{{- define "qwen-npu.npuMounts" -}}
{{- range fromJsonArray (include "qwen-npu.npuHostFiles" .) }}
- name: {{ .name }}
  mountPath: {{ .path }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "qwen-npu.npuVolumes" -}}
{{- range fromJsonArray (include "qwen-npu.npuHostFiles" .) }}
- name: {{ .name }}
  hostPath:
    path: {{ .path }}
    type: {{ .type }}
{{- end }}
{{- end }}
