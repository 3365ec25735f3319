# shellcheck shell=bash
# The CANN environment for every process of the engine container.
#
# Why this file exists: the CANN base image sets most Ascend variables with ENV, but the rest (the
# BiSheng compiler that triton-ascend needs, the ATB/NNAL libraries) only come from sourcing its
# set_env scripts, which the base image does in ~/.bashrc and /etc/profile: interactive shells only.
# The engine entrypoint sources this file before it starts SGLang, and BASH_ENV points here, so
# `kubectl exec ... -- bash -c '...'` gets the same environment.
#
# Inputs (environment):
#   QWEN_NPU_CANN_ENV_SCRIPTS  space-separated set_env scripts, sourced in order (the image sets it)
#   ATB_CXX_ABI                passed to the NNAL/ATB script as --cxx_abi (default 1)
# A missing script is one key=value warning line on stderr; the rest still load.
# Output: QWEN_NPU_CANN_ENV_LOADED=1 is exported so children do not source it again. (In the image,
# the entrypoint's own bash already loads it through BASH_ENV; its explicit `.` is then a no-op.)
# It also defines the container's log line (every bash of it loads this file first):

# qwen_npu_line PART LEVEL EVENT [key=value ...]: one line in the shape of every part of qwen-npu
# (qwen_npu/log.py), `qwen_npu.<part> level=<LEVEL> event=<event> key=value ... next="..."`; the
# level upper case, a value that is empty or holds a space, a quote, `=`, a tab or a newline
# double-quoted with backslash escapes (log.quote). Callers put next= last.
qwen_npu_line() {
    local part="$1" level="${2^^}" event="$3" field key value text
    shift 3
    if [ "$level" = WARN ]; then level=WARNING; fi
    text="qwen_npu.$part level=$level event=$event"
    for field in "$@"; do
        key="${field%%=*}" value="${field#*=}"
        if [ -z "$value" ] || [[ "$value" == *[\ \"=$'\t'$'\n']* ]]; then
            value="${value//\\/\\\\}"
            value="${value//\"/\\\"}"
            value="${value//$'\n'/\\n}"
            value="\"$value\""
        fi
        text+=" $key=$value"
    done
    printf '%s\n' "$text"
}

# qwen_npu_log LEVEL EVENT [key=value ...]: the entrypoint's line (part `entrypoint`), on stderr.
qwen_npu_log() {
    qwen_npu_line entrypoint "$@" >&2
}

qwen_npu_load_cann_env() {
    local script saved_opts errexit=0
    # Every shell option as the caller had it; errexit apart, since a command substitution does not
    # inherit it ($(set +o) always says `set +o errexit`).
    saved_opts=$(set +o)
    case $- in *e*) errexit=1 ;; esac
    set +eu
    for script in ${QWEN_NPU_CANN_ENV_SCRIPTS:-/usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh}; do
        if [ ! -r "$script" ]; then
            qwen_npu_log warning cann_env_missing "script=$script" \
                "next=check QWEN_NPU_CANN_ENV_SCRIPTS and the CANN base image (docs/images.md)"
            continue
        fi
        case "$script" in
            */nnal/atb/set_env.sh)
                # shellcheck disable=SC1090 # the scripts come from the CANN base image
                . "$script" "--cxx_abi=${ATB_CXX_ABI:-1}"
                ;;
            *)
                # shellcheck disable=SC1090
                . "$script"
                ;;
        esac
    done
    eval "$saved_opts"
    if [ "$errexit" = 1 ]; then set -e; fi
    export QWEN_NPU_CANN_ENV_LOADED=1
}

if [ "${QWEN_NPU_CANN_ENV_LOADED:-0}" != 1 ]; then
    qwen_npu_load_cann_env
fi
