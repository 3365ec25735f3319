# The load test (issue 6): make bench, bench-sweep, bench-ui, demo, perf-loadtest. See docs/loadtest.md.
#
# Every knob is a make variable that maps to one `qwen-npu bench` flag; unset ones keep the bench's
# defaults (the upstream pull request's command: 100 prompts, 1024 in / 100 out, ratio 1.0, seed 42).

CONC ?= 10
CONCS ?= 1 5 10
TARGET ?= http://127.0.0.1:30000
API ?= generate
WORKERS ?= 0
BENCH_OUT := $(OUT)/bench
OUTPUT ?= $(BENCH_OUT)/bench.jsonl
SWEEP_OUTPUT ?= $(BENCH_OUT)/sweep.jsonl
UI_PORT ?= 8089
DEMO_PROMPTS ?= 50
DEMO_HOLD ?= 0

# Optional flags: only passed when the variable is set.
BENCH_FLAGS = --target $(TARGET) --api $(API) --workers $(WORKERS) \
	$(if $(NUM_PROMPTS),--num-prompts $(NUM_PROMPTS)) \
	$(if $(INPUT_LEN),--input-len $(INPUT_LEN)) \
	$(if $(OUTPUT_LEN),--output-len $(OUTPUT_LEN)) \
	$(if $(RANGE_RATIO),--range-ratio $(RANGE_RATIO)) \
	$(if $(SEED),--seed $(SEED)) \
	$(if $(TOKENIZER),--tokenizer $(TOKENIZER)) \
	$(if $(VOCAB_SIZE),--vocab-size $(VOCAB_SIZE)) \
	$(if $(BASELINE),--baseline $(BASELINE)) \
	$(foreach t,$(THRESHOLDS),--threshold $(t))

.PHONY: bench bench-sweep bench-ui demo perf-loadtest

bench: $(STAMP) ## load test: make bench CONC=10 [TARGET= NUM_PROMPTS= INPUT_LEN= OUTPUT_LEN= API= WORKERS= BASELINE=]
	$(BIN)/qwen-npu bench $(BENCH_FLAGS) --concurrency $(CONC) --output $(OUTPUT)

bench-sweep: $(STAMP) ## one bench per concurrency: make bench-sweep CONCS="1 5 10" (table, PNG, HTML)
	$(BIN)/qwen-npu bench $(BENCH_FLAGS) --sweep "$(CONCS)" --output $(SWEEP_OUTPUT)

bench-ui: $(STAMP) ## locust web UI on the bench locustfile (http://127.0.0.1:8089; UI_PORT=)
	@echo ">> locust web UI on http://127.0.0.1:$(UI_PORT) against $(TARGET) (Ctrl-C to stop)"
	$(BIN)/locust -f qwen_npu/loadtest/locustfile.py --web-host 127.0.0.1 --web-port $(UI_PORT) \
		-H $(TARGET) -u $(CONC) -r $(CONC) --api $(API) \
		$(if $(NUM_PROMPTS),--num-prompts $(NUM_PROMPTS)) $(if $(INPUT_LEN),--input-len $(INPUT_LEN)) \
		$(if $(OUTPUT_LEN),--output-len $(OUTPUT_LEN)) $(if $(SEED),--seed $(SEED)) \
		$(if $(VOCAB_SIZE),--vocab-size $(VOCAB_SIZE))

demo: $(STAMP) ## start the simulator and the sidecar, run the CONC=10 bench, print the table, stop them
	$(BIN)/python -m qwen_npu.loadtest.demo --num-prompts $(DEMO_PROMPTS) --hold-s $(DEMO_HOLD) --out-dir $(OUT)/demo

perf-loadtest: $(STAMP) ## our figures vs sglang.benchmark.serving's vs the simulator's truth -> out/perf/loadtest.md
	@mkdir -p $(OUT)/perf
	HF_HUB_OFFLINE=1 $(BIN)/python -m tools.perf.loadtest --out $(OUT)/perf/loadtest.md

PERF_TARGETS += perf-loadtest
