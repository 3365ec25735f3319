"""Product tooling that is neither shipped nor a test: the chart tool behind `make chart`
(chart.py) and the benchmarks behind `make perf` (perf/)."""
