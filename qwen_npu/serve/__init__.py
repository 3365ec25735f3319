"""What runs beside the engine: the sidecar, the simulator, the metric catalogue, dashboards, alerts."""
