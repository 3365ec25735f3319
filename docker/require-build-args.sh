#!/usr/bin/env bash
# require-build-args.sh DOCKERFILE NAME...: stop a build step when a build argument is empty.
#
# Why this exists: docker/versions.env is the one source of the images' pins, so the Dockerfiles'
# ARG lines carry no default (a default would be the same pin written twice). A build that was not
# handed the values (`docker build` without the --build-arg list `make image` passes) must stop at
# the first step of the stage, naming what is missing, instead of installing something unpinned.
# The Dockerfiles run it as the first RUN of each stage, bind-mounted from the build context.
# Exit: 0, or 2 with one line naming every empty argument.
set -euo pipefail

file="${1:?usage: require-build-args.sh DOCKERFILE NAME...}"
shift
missing=()
for name in "$@"; do
    if [ -z "${!name:-}" ]; then missing+=("$name"); fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "qwen_npu.build level=ERROR event=build_arg_empty dockerfile=$file args=$(IFS=,; echo "${missing[*]}")" \
        "next=\"pass --build-arg NAME=<value> for each, from docker/versions.env (make image passes every key of it)\"" >&2
    exit 2
fi
