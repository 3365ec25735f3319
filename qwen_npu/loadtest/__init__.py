"""The locust load test behind `make bench`: dataset, metrics, report, baseline comparison."""
