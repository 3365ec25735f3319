"""The benchmarks behind `make perf`: one module per part, each writing out/perf/<part>.md."""
