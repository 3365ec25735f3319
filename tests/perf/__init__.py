"""Tests of the benchmarks' tooling (tools/perf): the assembly of docs/perf.md."""
