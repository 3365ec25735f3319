"""What runs beside the engine.

The sidecar, the simulator, the metric lists, and the dashboards and alerts generated from them.
"""
