#!/usr/bin/env bash
# engine-assets.sh: the engine image's release downloads (triton-ascend's wheel, sgl-kernel-npu's
# zip), named, fetched and checked against their sha256 in docker/versions.env.
#
# Why this exists: these two come from GitHub release pages, not from a package index, so nothing
# else checks that the bytes are the pinned ones; a swapped asset or an overridden version used to
# build fine and fail at the first model load. The asset names and the digest keys are written
# once, here: the Dockerfile's stack-npu stage runs `fetch`, `make image-digests` runs `digests`.
#
#   engine-assets.sh name    triton|kernel ARCH CHIP   the release file name
#   engine-assets.sh key     triton|kernel ARCH CHIP   the versions.env key of its sha256
#   engine-assets.sh fetch   triton|kernel DIR         download this machine's asset into DIR, check it
#   engine-assets.sh digests                           KEY=sha256 for every chip and architecture,
#                                                      or a `# KEY:` line naming an asset the
#                                                      release does not have (its HTTP status)
#
# Inputs (environment, the build arguments): TRITON_ASCEND_VERSION, TRITON_ASCEND_URL,
# SGL_KERNEL_NPU_VERSION, SGL_KERNEL_NPU_URL, NPU_TORCH_VERSION, CANN_VERSION,
# ENGINE_PYTHON_VERSION, CHIP (fetch), and the digest keys TRITON_ASCEND_SHA256_<ARCH>,
# SGL_KERNEL_NPU_SHA256_<CHIP>_<ARCH>. ENGINE_ASSETS_ARCH overrides `uname -m` (tests).
# Exit: 0, 2 (bad use or an empty input), 3 (download failed; `digests`: after trying every asset,
# when one is missing), 4 (sha256 mismatch).
set -euo pipefail

ARCHES=(x86_64 aarch64)
CHIPS=(910b a3)

die() {  # CODE EVENT FIELDS...: one line on stderr, then exit
    local code="$1"
    shift
    echo "qwen_npu.build level=ERROR event=$*" >&2
    exit "$code"
}

need() {  # NAME...: every named variable set and non-empty
    local name
    for name in "$@"; do
        if [ -z "${!name:-}" ]; then
            die 2 "build_arg_empty arg=$name next=\"pass --build-arg $name=<value> from docker/versions.env (make image passes every key of it)\""
        fi
    done
}

py_tag() { echo "cp${ENGINE_PYTHON_VERSION//./}"; }

name() {  # KIND ARCH CHIP
    case "$1" in
        triton)
            need TRITON_ASCEND_VERSION ENGINE_PYTHON_VERSION
            local py
            py="$(py_tag)"
            echo "triton_ascend-${TRITON_ASCEND_VERSION}-${py}-${py}-manylinux_2_27_$2.manylinux_2_28_$2.whl"
            ;;
        kernel)
            need SGL_KERNEL_NPU_VERSION NPU_TORCH_VERSION ENGINE_PYTHON_VERSION CANN_VERSION
            echo "sgl-kernel-npu-${SGL_KERNEL_NPU_VERSION}-torch${NPU_TORCH_VERSION}-py${ENGINE_PYTHON_VERSION//./}-cann${CANN_VERSION}-$3-$2.zip"
            ;;
        *) die 2 "bad_asset kind=$1 next=\"use triton or kernel\"" ;;
    esac
}

key() {  # KIND ARCH CHIP
    local arch chip
    arch="$(echo "$2" | tr '[:lower:]' '[:upper:]')"
    chip="$(echo "$3" | tr '[:lower:]' '[:upper:]')"
    case "$1" in
        triton) echo "TRITON_ASCEND_SHA256_${arch}" ;;
        kernel) echo "SGL_KERNEL_NPU_SHA256_${chip}_${arch}" ;;
        *) die 2 "bad_asset kind=$1 next=\"use triton or kernel\"" ;;
    esac
}

url() {  # KIND FILE
    case "$1" in
        triton)
            need TRITON_ASCEND_URL
            echo "${TRITON_ASCEND_URL}/v${TRITON_ASCEND_VERSION}/$2"
            ;;
        kernel)
            need SGL_KERNEL_NPU_URL
            echo "${SGL_KERNEL_NPU_URL}/${SGL_KERNEL_NPU_VERSION}/$2"
            ;;
    esac
}

download() {  # URL DEST
    curl -fsSL --retry 3 -o "$2" "$1" || die 3 "asset_download_failed url=$1 next=\"check the version pins and the *_URL build arguments (docs/images.md)\""
}

fetch() {  # KIND DIR
    local kind="$1" dir="$2" arch="${ENGINE_ASSETS_ARCH:-$(uname -m)}" chip="${CHIP:-}" file digest_key want got
    if [ "$kind" = kernel ]; then need CHIP; fi
    file="$(name "$kind" "$arch" "$chip")"
    digest_key="$(key "$kind" "$arch" "$chip")"
    want="${!digest_key:-}"
    if [ -z "$want" ]; then
        die 2 "asset_digest_missing asset=$file key=$digest_key next=\"set $digest_key in docker/versions.env: make image-digests prints it (on a machine that reaches the release downloads)\""
    fi
    mkdir -p "$dir"
    download "$(url "$kind" "$file")" "$dir/$file"
    got="$(sha256sum "$dir/$file" | cut -d' ' -f1)"
    if [ "$got" != "$want" ]; then
        rm -f "$dir/$file"
        die 4 "asset_digest_mismatch asset=$file key=$digest_key expected=$want got=$got next=\"a different file than the pinned one: check the version pins and the mirror; update $digest_key only for a release you checked\""
    fi
    echo "qwen_npu.build level=INFO event=asset_verified asset=$file sha256=$got" >&2
    echo "$dir/$file"
}

ASSETS_TMP=""
MISSING=0
digest_of() {  # KIND ARCH CHIP DIR: KEY=sha256 on stdout, or a `# KEY:` line and a WARNING line
    local kind="$1" arch="$2" chip="$3" dir="$4" file digest_key link status
    file="$(name "$kind" "$arch" "$chip")"
    digest_key="$(key "$kind" "$arch" "$chip")"
    link="$(url "$kind" "$file")"
    # on a failure, the HTTP status: a 404 is an asset the release does not have
    if status="$(curl -fsSL --retry 3 -o "$dir/$file" -w '%{http_code}' "$link" 2>/dev/null)"; then
        echo "$digest_key=$(sha256sum "$dir/$file" | cut -d' ' -f1)"
    else
        MISSING=$((MISSING + 1))
        if [ -z "$status" ] || [ "$status" = 000 ]; then status=unreachable; fi
        echo "# $digest_key: no $file in the release (HTTP $status at $link)"
        echo "qwen_npu.build level=WARNING event=asset_missing asset=$file chip=${chip:-any} arch=$arch status=$status url=$link" >&2
    fi
    rm -f "$dir/$file"
}

digests() {  # every asset, per chip and architecture, whether each exists or not
    local tmp arch chip
    tmp="$(mktemp -d)"
    ASSETS_TMP="$tmp"  # global: the EXIT trap runs after this function's locals are gone
    trap 'rm -rf "${ASSETS_TMP}"' EXIT
    for arch in "${ARCHES[@]}"; do
        digest_of triton "$arch" "" "$tmp"
        for chip in "${CHIPS[@]}"; do
            digest_of kernel "$arch" "$chip" "$tmp"
        done
    done
    if [ "$MISSING" -gt 0 ]; then
        die 3 "assets_missing count=$MISSING next=\"the release does not publish those (the # lines above): pin a release that has them, or build only the chips and architectures it has (docs/images.md)\""
    fi
}

case "${1:-}" in
    name | key)
        [ "$#" -eq 4 ] || die 2 "bad_usage next=\"engine-assets.sh $1 triton|kernel ARCH CHIP\""
        "$1" "$2" "$3" "$4"
        ;;
    fetch)
        [ "$#" -eq 3 ] || die 2 "bad_usage next=\"engine-assets.sh fetch triton|kernel DIR\""
        fetch "$2" "$3"
        ;;
    digests) digests ;;
    *) die 2 "bad_usage next=\"engine-assets.sh name|key|fetch|digests ...\"" ;;
esac
