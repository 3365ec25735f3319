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

# The CANN environment, and the log line (qwen_npu_log LEVEL EVENT key=value ...; the shape of
# qwen_npu/log.py, part `entrypoint`).
# shellcheck source=docker/cann-env.sh
. "${QWEN_NPU_CANN_ENV_FILE:-/usr/local/lib/qwen-npu/cann-env.sh}"

# NPU devices (docs/images.md "NPU devices"). The device plugin sets ASCEND_VISIBLE_DEVICES to the
# physical ids it allocated (e.g. 4,5); torch_npu numbers the devices the container sees 0..n-1 and
# reads ASCEND_RT_VISIBLE_DEVICES as such logical ids. A container that sees exactly its own devices
# needs no variable; one that sees more (privileged: every /dev/davinciN of the node) gets the
# positions of its allocated devices among the ones it sees. An ASCEND_RT_VISIBLE_DEVICES that is
# already set is kept. QWEN_NPU_DEV_DIR overrides /dev for tests.
qwen_npu_ids() {  # the comma-separated entries of $1, one a line, blanks removed
    local entry IFS=,
    for entry in $1; do
        entry="${entry//[[:space:]]/}"
        if [ -n "$entry" ]; then echo "$entry"; fi
    done
}

qwen_npu_device_nodes() {  # the N of every /dev/davinciN the container sees, ascending
    local node
    for node in "${QWEN_NPU_DEV_DIR:-/dev}"/davinci[0-9]*; do
        if [ -e "$node" ]; then echo "${node##*/davinci}"; fi
    done | sort -n
}

# The chips the device plugin actually allocated, from the pod annotation huawei.com/AscendReal
# (e.g. "Ascend910-4,Ascend910-5" -> "4,5"), which the chart hands the engine as a downwardAPI file
# (QWEN_NPU_POD_ANNOTATIONS). Empty when the file or the annotation is not there.
qwen_npu_ascend_real() {
    local file="${QWEN_NPU_POD_ANNOTATIONS:-/etc/qwen-npu/podinfo/annotations}" line entry ids=""
    [ -r "$file" ] || return 0
    line="$(grep -m1 '^huawei\.com/AscendReal=' "$file" 2>/dev/null)" || return 0
    line="${line#*=}"
    line="${line//\"/}"
    local IFS=,
    for entry in $line; do
        entry="${entry##*-}"
        if [[ "$entry" =~ ^[0-9]+$ ]]; then ids="${ids:+$ids,}$entry"; fi
    done
    echo "$ids"
}

qwen_npu_map_devices() {
    local real allocation="${ASCEND_VISIBLE_DEVICES:-}"
    real="$(qwen_npu_ascend_real)"
    if [ -n "$real" ]; then
        # The device plugin's record wins: ASCEND_VISIBLE_DEVICES may carry the scheduler's pick.
        if [ -n "$allocation" ] && [ "$allocation" != "$real" ]; then
            qwen_npu_log warning allocation_disagrees "ASCEND_VISIBLE_DEVICES=$allocation" "AscendReal=$real" \
                "next=using huawei.com/AscendReal (the chips the device plugin allocated)"
        fi
        allocation="$real"
    fi
    if [ -n "${ASCEND_RT_VISIBLE_DEVICES:-}" ] || [ -z "$allocation" ]; then
        return 0
    fi
    local -a allocated seen
    local id position logical=""
    mapfile -t allocated < <(qwen_npu_ids "$allocation")
    mapfile -t seen < <(qwen_npu_device_nodes)
    if [ "${#seen[@]}" -le "${#allocated[@]}" ]; then
        return 0  # the runtime sees only what was allocated (or less: the count check says so)
    fi
    for id in "${allocated[@]}"; do
        for position in "${!seen[@]}"; do
            if [ "${seen[$position]}" = "$id" ]; then
                logical="${logical:+$logical,}$position"
                continue 2
            fi
        done
        qwen_npu_log error allocated_npu_not_visible "allocated=$allocation" "missing=$id" \
            "seen=$(IFS=,; echo "${seen[*]}")" \
            "next=give the container the allocated devices (device plugin) or set ASCEND_RT_VISIBLE_DEVICES"
        exit 3
    done
    export ASCEND_RT_VISIBLE_DEVICES="$logical"
    qwen_npu_log info visible_devices_mapped "allocated=$allocation" "seen=${#seen[@]}" \
        "ASCEND_RT_VISIBLE_DEVICES=$ASCEND_RT_VISIBLE_DEVICES"
}
qwen_npu_map_devices

# The NPU count torch_npu will see: the entries of ASCEND_RT_VISIBLE_DEVICES when set, else the
# /dev/davinciN device entries.
qwen_npu_visible_npus() {
    local count
    if [ -n "${ASCEND_RT_VISIBLE_DEVICES:-}" ]; then
        count="$(qwen_npu_ids "$ASCEND_RT_VISIBLE_DEVICES" | wc -l)"
        echo "$count ASCEND_RT_VISIBLE_DEVICES"
        return
    fi
    count="$(qwen_npu_device_nodes | wc -l)"
    echo "$count ${QWEN_NPU_DEV_DIR:-/dev}/davinci[0-9]*"
}

# The host driver (docs/images.md "The host driver"). The image's CANN supports the Ascend HDK from
# QWEN_NPU_MIN_HDK_VERSION (MAJOR.MINOR, the image bakes it from docker/versions.env) on; a node on
# an older driver fails deep inside torch_npu, minutes later. The driver's version.info (no Ascend
# runtime mounts it: the chart mounts the node's file read-only at npu.driverVersionFile,
# QWEN_NPU_DRIVER_VERSION_FILE) holds
# lines like `Version=25.2.0` and `package_version=25.2.0`; package_version wins where both are
# there (some installs write a component version, e.g. 7.35.23, under Version). Below the minimum:
# one line and exit 5. A missing or unreadable file: one warning (the check cannot say), and on.
qwen_npu_driver_version() {  # the HDK version a version.info file states
    local line version="" package=""
    while IFS= read -r line || [ -n "$line" ]; do
        line="${line%$'\r'}"
        case "$line" in
            package_version=*) package="${line#*=}" ;;
            Version=*) version="${line#*=}" ;;
        esac
    done <"$1"
    echo "${package:-$version}"
}

qwen_npu_check_driver() {
    local min="${QWEN_NPU_MIN_HDK_VERSION:-}" file="${QWEN_NPU_DRIVER_VERSION_FILE:-/usr/local/Ascend/driver/version.info}"
    local label="${QWEN_NPU_HDK_NODE_LABEL:-qwen-npu.io/ascend-hdk}" have need_major need_minor
    if [ -z "$min" ]; then return 0; fi  # outside the image: nothing to compare with
    if ! [[ "$min" =~ ^([0-9]+)\.([0-9]+)$ ]]; then
        qwen_npu_log error bad_min_hdk_version "QWEN_NPU_MIN_HDK_VERSION=$min" \
            "next=set it to MAJOR.MINOR (docker/versions.env CANN_MIN_HDK_VERSION) or unset it"
        exit 2
    fi
    need_major="${BASH_REMATCH[1]}" need_minor="${BASH_REMATCH[2]}"
    if [ ! -r "$file" ]; then
        qwen_npu_log warning driver_version_unknown "file=$file" "needed=$min+" \
            "next=mount the node's driver version.info there (the chart does, at npu.driverVersionFile; no Ascend runtime does) so the driver can be checked"
        return 0
    fi
    have="$(qwen_npu_driver_version "$file")"
    if ! [[ "$have" =~ ^([0-9]+)\.([0-9]+) ]]; then
        qwen_npu_log warning driver_version_unknown "file=$file" "version=${have:-none}" "needed=$min+" \
            "next=the file states no MAJOR.MINOR version (package_version= or Version=): check the node's driver install"
        return 0
    fi
    if ((10#${BASH_REMATCH[1]} < 10#$need_major || (10#${BASH_REMATCH[1]} == 10#$need_major && 10#${BASH_REMATCH[2]} < 10#$need_minor))); then
        qwen_npu_log error driver_unsupported "installed=$have" "needed=$min+" "file=$file" \
            "next=upgrade the node's Ascend driver (HDK) to $min or later, or schedule on nodes whose label $label says so (scheduling.driverVersion in the chart; docs/images.md)"
        exit 5
    fi
    qwen_npu_log info driver_ok "installed=$have" "needed=$min+"
}

# Device access (docs/images.md "Device access"). The engine runs as a non-root uid with every
# capability dropped; the device nodes are 0660 for the node's HwHiAiUser group, and the device
# plugin's cgroup rules decide the rest. torch_npu only says "drvGetDevNum failed" much later, and a
# missing or denied devmm_svm (shared virtual memory) or hisi_hdc only at the first allocation, so
# the shared nodes (QWEN_NPU_SHARED_DEVICES below: the Ascend Docker Runtime mounts them with the
# davinciN nodes) and every davinciN the container sees are opened (read-write, then closed) here.
# One missing, or one that does not open: one line naming the node (and its owner gid and the value
# that grants it), exit 6.
QWEN_NPU_SHARED_DEVICES=(davinci_manager devmm_svm hisi_hdc)
qwen_npu_check_devices() {
    local dev="${QWEN_NPU_DEV_DIR:-/dev}" node gid mode
    local -a nodes=()
    for node in "$dev"/davinci[0-9]*; do
        if [ -e "$node" ]; then nodes+=("$node"); fi
    done
    if [ "${#nodes[@]}" -eq 0 ]; then return 0; fi  # no NPU at all: the count check speaks
    local -a shared=()
    for node in "${QWEN_NPU_SHARED_DEVICES[@]}"; do
        if [ ! -e "$dev/$node" ]; then
            qwen_npu_log error npu_device_missing "node=$dev/$node" "seen=${#nodes[@]}" \
                "next=the container runtime must hand over $node with the davinciN nodes (Ascend Docker Runtime / device plugin)"
            exit 6
        fi
        shared+=("$dev/$node")
    done
    nodes=("${shared[@]}" "${nodes[@]}")
    for node in "${nodes[@]}"; do
        if (: <>"$node") 2>/dev/null; then continue; fi
        gid="$(stat -c %g "$node")" mode="$(stat -c %a "$node")"
        qwen_npu_log error npu_device_denied "node=$node" "owner_gid=$gid" "mode=$mode" "uid=$(id -u)" \
            "groups=$(id -G | tr ' ' ,)" \
            "next=set npu.deviceGroupId=$gid (the pod's supplementalGroups; docs/chart.md), or run the engine with that gid"
        exit 6
    done
    qwen_npu_log info npu_devices_open "nodes=${#nodes[@]}" "owner_gid=$(stat -c %g "$dev/davinci_manager")"
}

# A check run in Python before the model load: qwen_npu_python_check CODE LOG PART EVENT ARGS...
# runs `python -m ARGS`, keeping its stderr in $QWEN_NPU_STATE_DIR/LOG (or /tmp); it passes on its
# one line, and when it fails, that line (or one naming the log's last line) and exit CODE.
qwen_npu_python_check() {
    local code="$1" log="$2" part="$3" event="$4" dir="${QWEN_NPU_STATE_DIR:-/tmp}" out line
    shift 4
    mkdir -p "$dir" 2>/dev/null || true
    if [ ! -w "$dir" ]; then dir=/tmp; fi
    out="$dir/$log"
    if line="$("${QWEN_NPU_PYTHON:-python3}" -m "$@" 2>"$out")"; then
        echo "$line" >&2
        return 0
    fi
    if [ -z "$line" ]; then
        line="$(qwen_npu_line "$part" error "$event" "detail=$(tail -n1 "$out")")"
    fi
    echo "$line log=$out" >&2
    exit "$code"
}

# The full patch check before the model load (the image build could only read the sources): every
# patch the engine's mode uses applied or fixed upstream, else one line and the pod stops (exit 4).
# It is handed the engine's flags: strictness follows their mode (MTP on/off, state dtype, draft
# quantization; a problem with a patch the mode does not run is a warning in the same line). Its
# output is kept in the state directory; the patches' states land in state.json, which the sidecar
# exports.
qwen_npu_verify_patches() {
    qwen_npu_python_check 4 patches-verify.log patches verify_failed \
        qwen_npu.cli patches verify --strict --startup --engine-args "$@"
}

# The AscendC ops SGLang's GDN path calls (torch.ops.npu.chunk_gated_delta_rule, ...): registered
# once torch_npu, sgl_kernel_npu and the kernel modules SGLang's path imports are imported (the
# lookup imports them first), else one line naming the missing ones and what it searched, exit 7.
# The image build read the kernel's files (qwen_npu.hardware.kernel_contents); only the node can
# load its library. Details are kept beside the patch check's log. A container without NPU device
# nodes (the CPU stand-in image, SGLang on its CPU path) has no NPU ops to load: one line says so.
qwen_npu_check_ops() {
    local node
    for node in "${QWEN_NPU_DEV_DIR:-/dev}"/davinci[0-9]*; do
        if [ -e "$node" ]; then break; fi
        qwen_npu_log info npu_ops_check_skipped "reason=no NPU device nodes in ${QWEN_NPU_DEV_DIR:-/dev}: not an NPU container"
        return 0
    done
    qwen_npu_python_check 7 npu-ops.log hardware npu_ops_check_failed \
        qwen_npu.hardware.kernel_contents --registered
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
            qwen_npu_log error bad_expected_npus "QWEN_NPU_EXPECTED_NPUS=$QWEN_NPU_EXPECTED_NPUS" \
                "next=set it to a positive integer (tpSize / nodes) or unset it"
            exit 2
        fi
        read -r visible counted_from <<<"$(qwen_npu_visible_npus)"
        if [ "$visible" -ne "$expected" ]; then
            qwen_npu_log error npu_count_mismatch "visible=$visible" "expected=$expected" "from=$counted_from" \
                "next=give the pod $expected NPUs (tpSize / nodes) or fix the device plugin's visible devices"
            exit 3
        fi
        qwen_npu_log info npu_count_ok "visible=$visible" "expected=$expected" "from=$counted_from"
    fi
    case "${1:-}" in
        -h | --help) ;;
        *)
            qwen_npu_check_driver
            qwen_npu_check_devices
            qwen_npu_verify_patches "$@"
            qwen_npu_check_ops
            ;;
    esac
    set -- "${QWEN_NPU_PYTHON:-python3}" -m sglang.launch_server "$@"
fi
# Program and argument count only: flags may carry secrets (--api-key); SGLang logs its own args.
qwen_npu_log info exec "program=$1" "args=$(($# - 1))"
exec "$@"
