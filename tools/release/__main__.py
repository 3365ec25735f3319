"""`python -m tools.release <verb>`: the command line behind make release / bundle / bundle-load /
model-image (mk/release.mk). Bad input gives one line on stderr and exit 1 (2 for usage).

Registry access comes from the environment: REGISTRY_USER / REGISTRY_PASSWORD (or
REGISTRY_AUTH_FILE, containers' auth.json) and REGISTRY_CA (the registry's CA, PEM). Signing uses
GNUPGHOME and the key's fingerprint (--key); verification a public keyring file (--keyring).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

from tools.release import ReleaseError, bundle, chart, log, model, publish, signing
from tools.release.registry import Registry, Target

# Where the nodes keep the site's public keyring (policy.json's keyPath).
NODE_KEYRING = Path("/etc/containers/keys/qwen-npu-site.gpg")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.release", description=__doc__.splitlines()[0]
    )
    verbs = parser.add_subparsers(dest="verb", required=True)

    rel = verbs.add_parser("release", help="push, sign and pin the images and the chart")
    rel.add_argument("--registry", required=True, help="host[:port]/namespace")
    image_help = "NAME:TAG=TRANSPORT:REF[,flavour=cpu|npu] (engine and sidecar)"
    rel.add_argument("--image", action="append", required=True, help=image_help)
    signing_key = os.environ.get("SIGNING_KEY", "")
    rel.add_argument("--key", default=signing_key, help="the signing key's fingerprint")
    rel.add_argument("--passphrase-file", default=os.environ.get("SIGNING_PASSPHRASE_FILE") or None)
    rel.add_argument("--out", type=Path, default=Path("out/release"))
    rel.add_argument("--overwrite", action="store_true", help="replace a release of this version")
    keyring_help = "where nodes keep the public keyring (policy.json's keyPath)"
    rel.add_argument("--node-keyring", type=Path, default=NODE_KEYRING, help=keyring_help)

    bun = verbs.add_parser("bundle", help="write the air-gapped bundle of a release")
    bun.add_argument("--record", type=Path, required=True)
    bun.add_argument("--bundle", type=Path, required=True)
    bun.add_argument("--keyring", type=Path, required=True, help="the site's public keyring")
    bun.add_argument("--site-registry", default=None)

    load = verbs.add_parser("bundle-load", help="push a bundle into a site registry and verify it")
    load.add_argument("--bundle", type=Path, required=True, help="the bundle directory or its .tar")
    load.add_argument("--registry", required=True)
    load.add_argument("--keyring", type=Path, required=True)
    load.add_argument("--out", type=Path, default=Path("out/bundle-load"))
    load.add_argument("--overwrite", action="store_true")
    load.add_argument("--node-keyring", type=Path, default=NODE_KEYRING)

    pull = verbs.add_parser("chart-pull", help="helm pull from oci:// and verify the provenance")
    pull.add_argument("--registry", required=True)
    pull.add_argument("--version", required=True)
    pull.add_argument("--keyring", type=Path, required=True)
    pull.add_argument("--out", type=Path, default=Path("out/chart-pull"))

    model = verbs.add_parser("model-image", help="a checkpoint (after preflight) as an OCI image")
    model.add_argument("--model-dir", type=Path, required=True)
    model.add_argument("--ref", required=True, help="host[:port]/repository:tag")
    model.add_argument("--path", default=None, help="directory inside the image (model.path)")
    model.add_argument("--preflight-args", default="", help="extra `qwen-npu preflight` flags")
    model.add_argument("--out", type=Path, default=Path("out/model-image"))

    mpull = verbs.add_parser("model-pull", help="pull a model image and check every file")
    mpull.add_argument("--ref", required=True)
    mpull.add_argument("--dest", type=Path, required=True)
    return parser


def _go_trust(argv: list[str]) -> None:
    """Helm's Go SDK reads SSL_CERT_FILE from the process's initial environment only (not from a
    later os.environ change): with REGISTRY_CA set, re-execute once with a bundle of the system's
    CAs plus that CA in SSL_CERT_FILE."""
    ca = os.environ.get("REGISTRY_CA")
    if not ca or os.environ.get("_QWEN_NPU_RELEASE_TRUST") == ca:
        return
    if not Path(ca).is_file():
        return  # Registry names the missing file in one line
    system = Path("/etc/ssl/certs/ca-certificates.crt")
    pem = (system.read_text() if system.is_file() else "") + "\n" + Path(ca).read_text()
    name = f"qwen-npu-release-ca-{hashlib.sha256(pem.encode()).hexdigest()[:16]}.pem"
    bundle = Path(tempfile.gettempdir()) / name  # one per CA: parallel runs do not share it
    bundle.write_text(pem)
    env = {**os.environ, "SSL_CERT_FILE": str(bundle), "_QWEN_NPU_RELEASE_TRUST": ca}
    os.execve(sys.executable, [sys.executable, "-m", "tools.release", *argv], env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    _go_trust(argv)
    try:
        if args.verb == "release":
            key = signing.SigningKey.find(args.key, None, args.passphrase_file)
            specs = [publish.ImageSpec.parse(text) for text in args.image]
            target = Target.parse(args.registry)
            result = publish.release(
                target, specs, key, args.out, args.overwrite, args.node_keyring
            )
        elif args.verb == "bundle":
            tarball = bundle.bundle(args.record, args.bundle, args.keyring, args.site_registry)
            result = {"tarball": str(tarball)}
        elif args.verb == "bundle-load":
            target, out = Target.parse(args.registry), args.out
            result = bundle.bundle_load(
                args.bundle, target, args.keyring, out, args.overwrite, args.node_keyring
            )
        elif args.verb == "chart-pull":
            target = Target.parse(args.registry)
            args.out.mkdir(parents=True, exist_ok=True)
            registry = Registry.from_env(target.host)
            checked = chart.pull(target, registry, args.version, args.keyring, args.out)
            result = {k: str(v) for k, v in checked.items()}
        elif args.verb == "model-image":
            flags = shlex.split(args.preflight_args)
            result = model.model_image(args.model_dir, args.ref, args.out, args.path, flags)
        else:
            result = model.model_pull(args.ref, args.dest)
    except ReleaseError as exc:
        lines = [line.strip(" -") for line in str(exc).splitlines() if line.strip(" -")]
        log("error", "failed", error="; ".join(lines))
        return 1
    except KeyboardInterrupt:
        log("error", "interrupted")
        return 130
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
