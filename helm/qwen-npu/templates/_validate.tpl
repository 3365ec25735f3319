{{/*
Value checks. "qwen-npu.valueProblems" prints one line per bad value (the value's name, what is
wrong, the fix); templates/validate.yaml renders it once per release and fails with every line at
once, so a values file with three mistakes costs one render, not three. Nothing else calls it: no
check hides inside the labels or any other helper.
*/}}

{{/*
Lines for every entry of a list of extra flags that repeats a flag the chart owns (also
abbreviated, since argparse accepts any unique prefix, or written `--flag=value`). Call with
(dict "args" <list> "owned" <json of "flag" -> "value"> "key" "<values key of the list>").
*/}}
{{- define "qwen-npu.ownedFlagProblems" -}}
{{- $owned := fromJson .owned }}
{{- $lines := list }}
{{- range .args }}
{{- $flag := regexReplaceAll "=.*$" (toString .) "" }}
{{- if and (hasPrefix "--" $flag) (gt (len $flag) 2) }}
{{- /* One line per entry: the exact flag, else the first flag it abbreviates. */}}
{{- $name := ternary $flag "" (hasKey $owned $flag) }}
{{- range $candidate := keys $owned | sortAlpha }}
{{- if and (not $name) (hasPrefix $flag $candidate) }}
{{- $name = $candidate }}
{{- end }}
{{- end }}
{{- if $name }}
{{- $value := get $owned $name }}
{{- $what := ternary $name (printf "%s (argparse reads it as %s)" $flag $name) (eq $flag $name) }}
{{- $lines = append $lines (printf "%s: %s is a flag the chart renders from %s; remove it from %s and set %s instead (preflight must judge what the engine runs)" $.key $what $value $.key $value) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $lines }}
{{- end }}

{{/* Ports a pod opens on the node with network.hostNetwork: name -> port. */}}
{{- define "qwen-npu.enginePorts" -}}
{{- $ports := dict "service.port" (int .Values.service.port) "sidecar.port" (int .Values.sidecar.port) }}
{{- if include "qwen-npu.multiNode" . }}
{{- $_ := set $ports "engine.distInitPort" (int .Values.engine.distInitPort) }}
{{- end }}
{{- toJson $ports }}
{{- end }}

{{- define "qwen-npu.valueProblems" -}}
{{- $v := .Values }}
{{- $p := list }}
{{- $tp := int $v.engine.tpSize }}
{{- $nodes := int $v.engine.nodes }}
{{- if lt $tp 1 }}
{{- $p = append $p "engine.tpSize must be at least 1" }}
{{- else }}
{{- if and (ge $nodes 1) (ne (mod $tp $nodes) 0) }}
{{- $p = append $p (printf "engine.tpSize (%d) must be a multiple of engine.nodes (%d): each node runs tpSize/nodes NPUs; pick a TP size divisible by the node count" $tp $nodes) }}
{{- end }}
{{- $vh := int $v.model.linearNumValueHeads }}
{{- if ne (mod $vh $tp) 0 }}
{{- $p = append $p (printf "engine.tpSize (%d) does not divide model.linearNumValueHeads (%d): pick a TP size that divides the value heads, or fix model.linearNumValueHeads from config.json" $tp $vh) }}
{{- end }}
{{- $kh := int $v.model.linearNumKeyHeads }}
{{- if and (gt $kh 0) (ne (mod $kh $tp) 0) }}
{{- $p = append $p (printf "engine.tpSize (%d) does not divide model.linearNumKeyHeads (%d): pick a TP size that divides the key heads, or fix model.linearNumKeyHeads from config.json" $tp $kh) }}
{{- end }}
{{- $ah := int $v.model.numAttentionHeads }}
{{- if and (gt $ah 0) (ne (mod $ah $tp) 0) }}
{{- $p = append $p (printf "engine.tpSize (%d) does not divide model.numAttentionHeads (%d): pick a TP size that divides the attention heads" $tp $ah) }}
{{- end }}
{{- end }}
{{- if eq $v.updateStrategy.type "RollingUpdate" }}
{{- $surge := toString $v.updateStrategy.rollingUpdate.maxSurge }}
{{- $unavail := toString $v.updateStrategy.rollingUpdate.maxUnavailable }}
{{- if and (has $surge (list "0" "0%")) (has $unavail (list "0" "0%")) }}
{{- $p = append $p "updateStrategy.rollingUpdate.maxSurge and updateStrategy.rollingUpdate.maxUnavailable are both 0: the rollout could never proceed; set maxUnavailable to 1 (full NPU pool) or use updateStrategy.type=Recreate" }}
{{- end }}
{{- end }}
{{- if eq $v.model.source "pvc" }}
{{- if not $v.model.pvc.claimName }}
{{- $p = append $p "model.pvc.claimName is empty: name the existing PVC that holds the checkpoint (or set model.source to hostPath or image)" }}
{{- end }}
{{- else if eq $v.model.source "hostPath" }}
{{- if not $v.model.hostPath.path }}
{{- $p = append $p "model.hostPath.path is empty: set the node directory that holds the checkpoint (or set model.source to pvc or image)" }}
{{- end }}
{{- else if eq $v.model.source "image" }}
{{- if not $v.model.image.reference }}
{{- $p = append $p "model.image.reference is empty: set the OCI image that holds the checkpoint (or set model.source to pvc or hostPath)" }}
{{- end }}
{{- end }}
{{- if not $v.model.path }}
{{- $p = append $p "model.path is empty: set the checkpoint directory inside the model volume" }}
{{- end }}
{{- if and $v.scheduling.faultRescheduling.enabled (not $v.scheduling.volcano) }}
{{- $p = append $p "scheduling.faultRescheduling.enabled without scheduling.volcano: MindCluster reschedules through its Volcano plugin; set scheduling.volcano=true (and install MindCluster), or turn fault rescheduling off" }}
{{- end }}
{{- $spBlock := int $v.scheduling.superPod.spBlock }}
{{- if and (gt $spBlock 0) (ne (mod (int $v.engine.tpSize) $spBlock) 0) }}
{{- $p = append $p (printf "scheduling.superPod.spBlock (%d) does not divide engine.tpSize (%d): a group's NPUs must fill whole SuperPoD blocks; pick a block size that divides the TP size" $spBlock (int $v.engine.tpSize)) }}
{{- end }}
{{- $keda := $v.autoscaling.keda }}
{{- if and $v.autoscaling.enabled $keda.enabled }}
{{- $p = append $p "autoscaling.enabled and autoscaling.keda.enabled are both set: KEDA makes its own HPA and two autoscalers would fight over the replicas; keep one (autoscaling.keda needs no metrics adapter)" }}
{{- end }}
{{- if and $keda.enabled (not $keda.serverAddress) }}
{{- $p = append $p "autoscaling.keda.serverAddress is empty: KEDA queries Prometheus itself; set the Prometheus base URL it can reach, e.g. http://prometheus-operated.monitoring.svc:9090" }}
{{- end }}
{{- if and $keda.enabled $keda.ttft.enabled (le (float64 $keda.ttft.sloSeconds) 0.0) }}
{{- $p = append $p "autoscaling.keda.ttft.enabled without autoscaling.keda.ttft.sloSeconds: set the TTFT p90 objective in seconds (e.g. 2), or turn the TTFT trigger off" }}
{{- end }}
{{- if and (or $v.autoscaling.enabled $keda.enabled) (lt (int $v.autoscaling.minReplicas) 1) }}
{{- $p = append $p (printf "autoscaling.minReplicas is %d: scale to zero is not supported (with no engine there is no sglang:num_queue_reqs to wake on, requests fail instead of queueing, and a cold start takes engine.startupBudgetSeconds = %d s); set autoscaling.minReplicas >= 1 (docs/chart.md \"Scale to zero\")" (int $v.autoscaling.minReplicas) (int $v.engine.startupBudgetSeconds)) }}
{{- end }}
{{- if and (or $v.autoscaling.enabled $keda.enabled) (gt (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) }}
{{- $p = append $p (printf "autoscaling.minReplicas (%d) is above autoscaling.maxReplicas (%d): lower minReplicas or raise maxReplicas" (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) }}
{{- end }}
{{- if and $v.router.enabled (eq (int $v.replicas) 0) (not (or $v.autoscaling.enabled $keda.enabled)) }}
{{- $p = append $p "router.enabled with replicas 0: the router would have no engine; set replicas >= 1" }}
{{- end }}
{{- range $line := list
  (include "qwen-npu.ownedFlagProblems" (dict "args" $v.preflight.extraArgs "owned" (include "qwen-npu.preflightOwnedFlags" .) "key" "preflight.extraArgs"))
  (include "qwen-npu.ownedFlagProblems" (dict "args" $v.engine.extraArgs "owned" (include "qwen-npu.engineOwnedFlags" .) "key" "engine.extraArgs")) }}
{{- if $line }}
{{- $p = concat $p (splitList "\n" $line) }}
{{- end }}
{{- end }}
{{- range $name, $instead := dict "QWEN_NPU_DISABLE_PATCHES" "patches.disabled" "QWEN_NPU_GDN_DECODE_ROUTE" "patches.gdnDecodeRoute" "SGLANG_MAMBA_SSM_DTYPE" "engine.mambaSsmDtype" "QWEN_NPU_CHIP" "npu.chip" "SGLANG_SET_CPU_AFFINITY" "engine.cpuAffinity" "QWEN_NPU_EXPECTED_NPUS" "engine.tpSize and engine.nodes" "HCCL_SOCKET_IFNAME" "network.hcclSocketIfname" "GLOO_SOCKET_IFNAME" "network.glooSocketIfname" "HCCL_IF_IP" "network.hcclIfIpFromPodIp" }}
{{- if hasKey $v.engine.ascendEnv $name }}
{{- $p = append $p (printf "engine.ascendEnv sets %s: set %s instead (the chart renders it for the engine and preflight alike)" $name $instead) }}
{{- end }}
{{- range $v.engine.extraEnv }}
{{- if eq (toString (get . "name")) $name }}
{{- $p = append $p (printf "engine.extraEnv sets %s: set %s instead (the chart renders it for the engine and preflight alike; an extraEnv entry would reach the engine only)" $name $instead) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $v.mtp.enabled (lt (int $v.mtp.numDraftTokens) 2) }}
{{- $p = append $p "mtp.numDraftTokens must be at least 2 with MTP on (one verified token plus drafts); or set mtp.enabled=false" }}
{{- end }}
{{- /* The driver label (issue 33): a rule without a label, or a value that is no MAJOR.MINOR. */}}
{{- if and $v.scheduling.driverVersion.values (not $v.scheduling.driverVersion.nodeLabel) }}
{{- $p = append $p "scheduling.driverVersion.values is set but scheduling.driverVersion.nodeLabel is empty: name the node label that states the HDK (e.g. qwen-npu.io/ascend-hdk)" }}
{{- end }}
{{- range $v.scheduling.driverVersion.values }}
{{- if not (regexMatch "^[0-9]+\\.[0-9]+$" (toString .)) }}
{{- $p = append $p (printf "scheduling.driverVersion.values has %q: each entry is an HDK MAJOR.MINOR as the node label states it (e.g. \"25.2\")" (toString .)) }}
{{- end }}
{{- end }}
{{- /* Multi-node wiring (issue 14): HCCL and Gloo need the NIC between the nodes. */}}
{{- if and (gt $nodes 1) (not $v.network.hcclSocketIfname) }}
{{- $p = append $p (printf "network.hcclSocketIfname is empty but engine.nodes is %d: HCCL and Gloo need the interface between the nodes (the pod's, usually eth0; with network.hostNetwork the host NIC, e.g. enp189s0f0); `lo` only works on one node" $nodes) }}
{{- end }}
{{- if and (gt $nodes 1) (eq (toString $v.network.hcclSocketIfname) "lo") }}
{{- $p = append $p (printf "network.hcclSocketIfname is lo but engine.nodes is %d: the loopback interface cannot reach the other nodes; name the pod's (eth0) or the host's NIC" $nodes) }}
{{- end }}
{{- if and (gt $nodes 1) (eq (toString $v.network.glooSocketIfname) "lo") }}
{{- $p = append $p (printf "network.glooSocketIfname is lo but engine.nodes is %d: the loopback interface cannot reach the other nodes; leave it empty (same as network.hcclSocketIfname) or name the NIC" $nodes) }}
{{- end }}
{{- if $v.network.hostNetwork }}
{{- $seen := dict }}
{{- $inUse := list }}
{{- range $v.network.hostPortsInUse }}
{{- $inUse = append $inUse (toString (int .)) }}
{{- end }}
{{- $ports := fromJson (include "qwen-npu.enginePorts" .) }}
{{- range $name := keys $ports | sortAlpha }}
{{- $port := toString (int (get $ports $name)) }}
{{- if hasKey $seen $port }}
{{- $p = append $p (printf "%s (%s) equals %s: with network.hostNetwork both open on the node's address; give them different ports" $name $port (get $seen $port)) }}
{{- else }}
{{- $_ := set $seen $port $name }}
{{- end }}
{{- if has $port $inUse }}
{{- $p = append $p (printf "%s (%s) is in network.hostPortsInUse: with network.hostNetwork the engine pod would clash with what already listens on the node; pick another port" $name $port) }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $v.npu.runtime "hostPath" }}
{{- if not $v.npu.hostPath.driverPath }}
{{- $p = append $p "npu.hostPath.driverPath is empty with npu.runtime=hostPath: set the node's driver directory (usually /usr/local/Ascend/driver), or use npu.runtime=ascend-docker-runtime" }}
{{- end }}
{{- end }}
{{- /* CPU affinity needs an exclusive cpuset: a Guaranteed pod with whole CPUs. */}}
{{- if and (eq $v.engine.cpuAffinity "on") (not (include "qwen-npu.exclusiveCpus" .)) }}
{{- $p = append $p "engine.cpuAffinity is on but the engine pod is not Guaranteed with whole CPUs (every container's requests equal its limits, engine.resources.limits.cpu an integer): SGLang would pin to CPUs it shares; set the resources (helm/qwen-npu/ci/guaranteed-values.yaml) or engine.cpuAffinity=auto" }}
{{- end }}
{{- /* Drain (issue 15): the grace period must cover the preStop pause, the longest request and the exit. */}}
{{- $need := int (include "qwen-npu.drainSeconds" .) }}
{{- $grace := int $v.engine.terminationGracePeriodSeconds }}
{{- if and (gt $grace 0) (lt $grace $need) }}
{{- $p = append $p (printf "engine.terminationGracePeriodSeconds (%d) is shorter than the drain (%d s = engine.drain.preStopSeconds + the longest request at engine.drain limits + engine.drain.exitSeconds): in-flight requests would be killed; raise it or set 0 to compute it" $grace $need) }}
{{- end }}
{{- if $v.router.enabled }}
{{- $rgrace := int $v.router.shutdownGracePeriodSecs }}
{{- $longest := int (include "qwen-npu.longestRequestSeconds" .) }}
{{- if lt $rgrace $longest }}
{{- $p = append $p (printf "router.shutdownGracePeriodSecs (%d) is shorter than the longest request (%d s at engine.drain limits): a router rollout would cut streams; raise it to at least %d" $rgrace $longest $longest) }}
{{- end }}
{{- if eq (int $v.router.metricsPort) (int $v.service.port) }}
{{- $p = append $p (printf "router.metricsPort (%d) equals service.port: the router's metrics need their own port" (int $v.router.metricsPort)) }}
{{- end }}
{{- end }}
{{- join "\n" $p }}
{{- end }}
