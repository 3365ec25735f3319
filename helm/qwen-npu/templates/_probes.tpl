{{- /*
The startup budget is one value, engine.startupBudgetSeconds (docs/chart.md "Probes"). The alert
threshold monitoring.prometheusRule.thresholds.startupBudgetSeconds is a deprecated alias: 0 (the
default) follows the budget; a non-zero value still sets the QwenNpuStartupSlow threshold alone,
and NOTES.txt warns. prometheusrule.yaml and configmap-dashboards.yaml fill the
${thresholds.startupBudgetSeconds} placeholder from "qwen-npu.startupAlertSeconds".
*/}}
{{- define "qwen-npu.startupAlertSeconds" -}}
{{- $old := int (default 0 .Values.monitoring.prometheusRule.thresholds.startupBudgetSeconds) -}}
{{- if gt $old 0 -}}
{{- $old -}}
{{- else -}}
{{- int .Values.engine.startupBudgetSeconds -}}
{{- end -}}
{{- end }}

{{- define "qwen-npu.startupAliasWarning" -}}
{{- $old := int (default 0 .Values.monitoring.prometheusRule.thresholds.startupBudgetSeconds) -}}
{{- if gt $old 0 -}}
WARNING: monitoring.prometheusRule.thresholds.startupBudgetSeconds is deprecated. QwenNpuStartupSlow fires after {{ $old }} s while the kubelet and the sidecar allow engine.startupBudgetSeconds = {{ int .Values.engine.startupBudgetSeconds }} s. Set engine.startupBudgetSeconds (the one startup budget) and remove the old key.
{{- end -}}
{{- end }}
