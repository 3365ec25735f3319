#!/usr/bin/env bash
# qwen-npu-entrypoint: the engine image's ENTRYPOINT (contract in docs/architecture.md).
#
# Why it exists: SGLang on Ascend needs the CANN environment (set_env scripts) in every process,
# signals delivered to the engine (a pod's SIGTERM must reach SGLang so it stops cleanly), and the
# engine's exit status as the container's (so Kubernetes sees a crash as a crash).
#
#   qwen-npu-entrypoint [--sglang-flag ...]   exec python3 -m sglang.launch_server with the flags
#   qwen-npu-entrypoint <command> [args ...]  exec any command in the same environment, e.g.
#                                             `qwen-npu preflight /models/x --tp 2` (init container)
#
# As PID 1 it re-executes itself under tini (when installed) so signals are forwarded and zombies
# reaped; otherwise it execs the command directly, which then receives the signals itself.
set -eo pipefail

if [ "$$" = 1 ] && [ -z "${QWEN_NPU_UNDER_INIT:-}" ] && command -v "${QWEN_NPU_INIT:-tini}" >/dev/null 2>&1; then
    export QWEN_NPU_UNDER_INIT=1
    exec "${QWEN_NPU_INIT:-tini}" -- "$0" "$@"
fi

# shellcheck source=docker/cann-env.sh
. "${QWEN_NPU_CANN_ENV_FILE:-/usr/local/lib/qwen-npu/cann-env.sh}"

# NPU devices (docs/images.md "NPU devices"). Device plugins set ASCEND_VISIBLE_DEVICES; CANN's
# runtime and torch_npu read ASCEND_RT_VISIBLE_DEVICES: copy it over when only the former is set.
if [ -z "${ASCEND_RT_VISIBLE_DEVICES:-}" ] && [ -n "${ASCEND_VISIBLE_DEVICES:-}" ]; then
    export ASCEND_RT_VISIBLE_DEVICES="$ASCEND_VISIBLE_DEVICES"
    echo "qwen-npu-entrypoint level=info event=visible_devices_mapped ASCEND_RT_VISIBLE_DEVICES=$ASCEND_RT_VISIBLE_DEVICES" >&2
fi

# The visible NPU count: the entries of ASCEND_RT_VISIBLE_DEVICES when set, else the /dev/davinciN
# device entries (QWEN_NPU_DEV_DIR overrides /dev for tests).
qwen_npu_visible_npus() {
    local count=0 entry
    if [ -n "${ASCEND_RT_VISIBLE_DEVICES:-}" ]; then
        local IFS=,
        for entry in $ASCEND_RT_VISIBLE_DEVICES; do
            entry="${entry//[[:space:]]/}"
            if [ -n "$entry" ]; then count=$((count + 1)); fi
        done
        echo "$count ASCEND_RT_VISIBLE_DEVICES"
        return
    fi
    for entry in "${QWEN_NPU_DEV_DIR:-/dev}"/davinci[0-9]*; do
        if [ -e "$entry" ]; then count=$((count + 1)); fi
    done
    echo "$count ${QWEN_NPU_DEV_DIR:-/dev}/davinci[0-9]*"
}

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    # Before the model load: the engine must see exactly the NPUs its TP share needs (the chart
    # sets QWEN_NPU_EXPECTED_NPUS = tpSize / nodes), else it would fail (or hang in HCCL) much later.
    if [ -n "${QWEN_NPU_EXPECTED_NPUS:-}" ]; then
        expected=0
        case "$QWEN_NPU_EXPECTED_NPUS" in
            *[!0-9]*) ;;
            *) expected=$((10#$QWEN_NPU_EXPECTED_NPUS)) ;;
        esac
        if [ "$expected" -lt 1 ]; then
            echo "qwen-npu-entrypoint level=error event=bad_expected_npus QWEN_NPU_EXPECTED_NPUS=$QWEN_NPU_EXPECTED_NPUS" \
                "action=\"set it to a positive integer (tpSize / nodes) or unset it\"" >&2
            exit 2
        fi
        read -r visible counted_from <<<"$(qwen_npu_visible_npus)"
        if [ "$visible" -ne "$expected" ]; then
            echo "qwen-npu-entrypoint level=error event=npu_count_mismatch visible=$visible expected=$expected" \
                "from=$counted_from action=\"give the pod $expected NPUs (tpSize / nodes) or fix the device plugin's visible devices\"" >&2
            exit 3
        fi
        echo "qwen-npu-entrypoint level=info event=npu_count_ok visible=$visible expected=$expected from=$counted_from" >&2
    fi
    set -- "${QWEN_NPU_PYTHON:-python3}" -m sglang.launch_server "$@"
fi
# Program and argument count only: flags may carry secrets (--api-key); SGLang logs its own args.
echo "qwen-npu-entrypoint level=info event=exec program=$1 args=$(($# - 1))" >&2
exec "$@"
