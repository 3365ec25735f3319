# qwen-npu qualify (issue 43): a deployment's first hour as claims with verdicts, one report.
#
#   make qualify TARGET=<engine url> [COMPARE=<url: MTP off or the copy route>] [SIDECAR=<url>]
#                [STATE_DIR=<dir>] [ENGINE_LOG=<file>] [EVAL=<gsm8k.jsonl>] [KERNELS=1]
#                [REQUIRE_NPU=1] [CONCS="1 5 10"] [NUM_PROMPTS=] [INPUT_LEN=] [OUTPUT_LEN=]
#                [QUALIFY_OUT=out/qualify] [QUALIFY_ARGS=<any other qwen-npu qualify flag>]
#
# Each variable maps to one `qwen-npu qualify` flag and is passed only when set (the verb's own
# defaults otherwise: the upstream benchmark's shape, every claim). Exit status as the verb's: 0
# every claim that ran passed, 1 one failed, 2 bad input. docs/runbook.md "Qualifying a
# deployment" says what to do with each failed claim.

QUALIFY_OUT ?= $(OUT)/qualify
QUALIFY_FLAGS = $(if $(TARGET),--target '$(TARGET)') $(if $(COMPARE),--compare '$(COMPARE)') \
	$(if $(SIDECAR),--sidecar '$(SIDECAR)') $(if $(STATE_DIR),--state-dir '$(STATE_DIR)') \
	$(if $(ENGINE_LOG),--engine-log '$(ENGINE_LOG)') $(if $(EVAL),--eval '$(EVAL)') \
	$(if $(KERNELS),--kernels) $(if $(REQUIRE_NPU),--require-npu) \
	$(if $(CONCS),--concs '$(CONCS)') $(if $(NUM_PROMPTS),--num-prompts $(NUM_PROMPTS)) \
	$(if $(INPUT_LEN),--input-len $(INPUT_LEN)) $(if $(OUTPUT_LEN),--output-len $(OUTPUT_LEN)) \
	--output-dir '$(QUALIFY_OUT)' $(QUALIFY_ARGS)

.PHONY: qualify

qualify: $(STAMP) ## qualify a deployment: make qualify TARGET=<url> [COMPARE= SIDECAR= EVAL= KERNELS=1 REQUIRE_NPU=1] (report in out/qualify)
	$(BIN)/qwen-npu qualify $(QUALIFY_FLAGS)
