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

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- "${QWEN_NPU_PYTHON:-python3}" -m sglang.launch_server "$@"
fi
# Program and argument count only: flags may carry secrets (--api-key); SGLang logs its own args.
echo "qwen-npu-entrypoint level=info event=exec program=$1 args=$(($# - 1))" >&2
exec "$@"
