"""The metric lists, the bottom floor: every metric name the project exports or reads (catalogue,
sglang, external), declared with ``spec.MetricSpec``; this package imports nothing above it."""
