# The load test (issue 6): make bench, bench-sweep, bench-ui, demo, perf-loadtest; bench-compare and
# mtp-tune (issue 17). See docs/loadtest.md.
#
# Every knob is a make variable that maps to one `qwen-npu bench` flag; unset ones keep the bench's
# defaults (the upstream pull request's command: 100 prompts, 1024 in / 100 out, ratio 1.0, seed 42).

CONC ?= 10
CONCS ?= 1 5 10
# TARGET: the engine's URL; unset, the bench's own default (the local engine: qwen_npu/ports.py).
TARGET ?=
API ?= generate
WORKERS ?= 0
BENCH_OUT := $(OUT)/bench
OUTPUT ?= $(BENCH_OUT)/bench.jsonl
SWEEP_OUTPUT ?= $(BENCH_OUT)/sweep.jsonl
UI_PORT ?= 8089
DEMO_PROMPTS ?= 50
DEMO_HOLD ?= 0

# Optional flags: only passed when the variable is set. DATA_FLAGS: what bench-compare and
# mtp-tune pass on to every bench they run.
DATA_FLAGS = --api $(API) \
	$(if $(NUM_PROMPTS),--num-prompts $(NUM_PROMPTS)) \
	$(if $(INPUT_LEN),--input-len $(INPUT_LEN)) \
	$(if $(OUTPUT_LEN),--output-len $(OUTPUT_LEN)) \
	$(if $(RANGE_RATIO),--range-ratio $(RANGE_RATIO)) \
	$(if $(SEED),--seed $(SEED)) \
	$(if $(TOKENIZER),--tokenizer $(TOKENIZER)) \
	$(if $(VOCAB_SIZE),--vocab-size $(VOCAB_SIZE))
BENCH_FLAGS = $(if $(TARGET),--target $(TARGET)) --workers $(WORKERS) $(DATA_FLAGS) \
	$(if $(BASELINE),--baseline $(BASELINE)) \
	$(foreach t,$(THRESHOLDS),--threshold $(t))

.PHONY: bench bench-sweep bench-ui bench-compare mtp-tune demo perf-loadtest

bench: $(STAMP) ## load test: make bench CONC=10 [TARGET= NUM_PROMPTS= INPUT_LEN= OUTPUT_LEN= API= WORKERS= BASELINE=]
	$(BIN)/qwen-npu bench $(BENCH_FLAGS) --concurrency $(CONC) --output $(OUTPUT)

bench-sweep: $(STAMP) ## one bench per concurrency: make bench-sweep CONCS="1 5 10" (table, PNG, HTML)
	$(BIN)/qwen-npu bench $(BENCH_FLAGS) --sweep "$(CONCS)" --output $(SWEEP_OUTPUT)

bench-ui: $(STAMP) ## locust web UI on the bench locustfile (http://127.0.0.1:8089; UI_PORT=)
	@echo ">> locust web UI on http://127.0.0.1:$(UI_PORT) against $(or $(TARGET),the local engine) (Ctrl-C to stop)"
	$(BIN)/locust -f qwen_npu/loadtest/locustfile.py --web-host 127.0.0.1 --web-port $(UI_PORT) \
		$(if $(TARGET),-H $(TARGET)) -u $(CONC) -r $(CONC) --api $(API) \
		$(if $(NUM_PROMPTS),--num-prompts $(NUM_PROMPTS)) $(if $(INPUT_LEN),--input-len $(INPUT_LEN)) \
		$(if $(OUTPUT_LEN),--output-len $(OUTPUT_LEN)) $(if $(SEED),--seed $(SEED)) \
		$(if $(VOCAB_SIZE),--vocab-size $(VOCAB_SIZE))

# bench-compare: A= and B= are required; CONCS as for bench-sweep (the docs use "1 5 10 32").
REPEATS ?= 3
COMPARE_OUTPUT ?= $(BENCH_OUT)/compare.jsonl
bench-compare: $(STAMP) ## the same bench against two endpoints, interleaved, repeated: make bench-compare A=<url> B=<url> [CONCS= LABEL_A= LABEL_B= REPEATS=3]
	$(BIN)/qwen-npu bench-compare --a "$(A)" --b "$(B)" --concs "$(CONCS)" \
		--repeats $(REPEATS) --output $(COMPARE_OUTPUT) \
		$(if $(LABEL_A),--label-a "$(LABEL_A)") $(if $(LABEL_B),--label-b "$(LABEL_B)") $(DATA_FLAGS)

# mtp-tune: locally one simulator per setting from SIM_PROFILE (mk/sim.mk); on a target URLS="off=<url> 3=<url> ...".
SETTINGS ?= off 1 2 3
TUNE_CONCS ?= 1 5 10 32
TIME_SCALE ?= 0.5
WAVES ?= 2
TUNE_OUTPUT ?= $(BENCH_OUT)/mtp-tune.jsonl
mtp-tune: $(STAMP) ## which MTP setting per concurrency band, with the values overlay: make mtp-tune [SETTINGS="off 1 2 3" TUNE_CONCS= URLS="off=<url> 3=<url>" REPEATS=]
	$(BIN)/qwen-npu mtp-tune --settings "$(SETTINGS)" --concs "$(TUNE_CONCS)" \
		--repeats $(REPEATS) --waves $(WAVES) --output $(TUNE_OUTPUT) \
		$(if $(URLS),--urls "$(URLS)",--profile $(SIM_PROFILE) --time-scale $(TIME_SCALE)) $(DATA_FLAGS)

demo: $(STAMP) ## start the simulator and the sidecar, run the CONC=10 bench, print the table, stop them
	$(BIN)/python -m qwen_npu.loadtest.demo --num-prompts $(DEMO_PROMPTS) --hold-s $(DEMO_HOLD) --out-dir $(OUT)/demo

perf-loadtest: $(STAMP) ## our figures vs sglang.benchmark.serving's vs the simulator's truth -> out/perf/loadtest.md
	@mkdir -p $(OUT)/perf
	HF_HUB_OFFLINE=1 $(BIN)/python -m tools.perf.loadtest --out $(OUT)/perf/loadtest.md

PERF_TARGETS += perf-loadtest
