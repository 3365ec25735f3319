"""Dashboards, alert rules and the autoscaler's queries as code, from the metric lists
(``qwen-npu dashboards`` / ``make dashboards`` writes them under ``helm/qwen-npu/files/``)."""
