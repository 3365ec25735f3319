"""The locust load test behind `make bench`, its dataset, metrics, report and baseline comparison."""
