"""Dashboards and alert rules as code, generated from the project's metric lists.

One source for everything an on-call engineer looks at: ``config`` holds the selectors and
thresholds, one module per alert group (``alerts_*``) and per dashboard (``dashboard_*``), and
``generate`` writes the committed files under ``helm/qwen-npu/files/`` that the chart deploys
(``qwen-npu dashboards`` / ``make dashboards``).
"""
