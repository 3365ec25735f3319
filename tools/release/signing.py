"""Signatures with the site's GnuPG key: images (containers' "simple signing", which podman,
skopeo and CRI-O check through policy.json), the chart (Helm provenance) and the release record.

Why GnuPG for all: one key the site owns signs everything it pulls, so rotating it is one
procedure (docs/images.md). skopeo's standalone-sign / standalone-verify do the image signatures,
so the check here is the one a node runs; they live in containers/image's lookaside tree, which
registries.d points the nodes at.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.release import ReleaseError


def run(argv: list[str], *, what: str, env: dict[str, str] | None = None) -> str:
    """Run a tool; on failure one line with its last stderr line."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=env, check=False, timeout=3600
        )
    except FileNotFoundError:
        raise ReleaseError(
            f"{what}: {argv[0]} is not installed; run `make tools-release`"
        ) from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        raise ReleaseError(f"{what}: {argv[0]} failed ({lines[-1] if lines else 'no output'})")
    return proc.stdout


@dataclass(frozen=True)
class SigningKey:
    """The site key in a GnuPG home: its fingerprint and its user id (Helm matches by name)."""

    fingerprint: str
    uid: str
    gnupghome: str
    passphrase_file: str | None = None

    @classmethod
    def find(cls, key: str, gnupghome: str | None, passphrase_file: str | None) -> SigningKey:
        home = gnupghome or os.environ.get("GNUPGHOME") or str(Path.home() / ".gnupg")
        if not key:
            raise ReleaseError(
                "no signing key given; set SIGNING_KEY=<fingerprint> of a secret key in "
                f"GNUPGHOME={home} (docs/images.md 'The signing key')"
            )
        out = run(
            ["gpg", "--batch", "--with-colons", "--list-secret-keys", key],
            what=f"SIGNING_KEY={key} in GNUPGHOME={home}",
            env={**os.environ, "GNUPGHOME": home},
        )
        fprs = [ln.split(":")[9] for ln in out.splitlines() if ln.startswith("fpr:")]
        uids = [ln.split(":")[9] for ln in out.splitlines() if ln.startswith("uid:")]
        primaries = [ln for ln in out.splitlines() if ln.startswith("sec:")]
        if len(primaries) != 1 or not fprs or not uids:
            raise ReleaseError(
                f"SIGNING_KEY={key} matches {len(primaries)} secret keys in GNUPGHOME={home}; "
                "give the full fingerprint of one"
            )
        return cls(fprs[0], uids[0], home, passphrase_file)

    def env(self) -> dict[str, str]:
        return {**os.environ, "GNUPGHOME": self.gnupghome}

    def export_public(self, path: Path) -> None:
        """The binary public keyring (what policy.json's keyPath and Helm's --keyring read)."""
        argv = ["gpg", "--batch", "--yes", "--output", str(path), "--export", self.fingerprint]
        run(argv, what=f"exporting SIGNING_KEY={self.fingerprint}", env=self.env())

    def export_secret(self, path: Path) -> None:
        """A legacy secret keyring for Helm's signer (written under a private work dir)."""
        argv = ["gpg", "--batch", "--pinentry-mode", "loopback"]
        if self.passphrase_file:
            argv += ["--passphrase-file", self.passphrase_file]
        proc = subprocess.run(
            [*argv, "--export-secret-keys", self.fingerprint],
            capture_output=True,
            env=self.env(),
            check=False,
        )
        if proc.returncode != 0 or not proc.stdout:
            raise ReleaseError(
                f"SIGNING_KEY={self.fingerprint}: the secret key cannot be exported for Helm's "
                "signer; give SIGNING_PASSPHRASE_FILE if it is protected"
            )
        path.touch(mode=0o600)
        path.write_bytes(proc.stdout)

    def sign_manifest(self, manifest: bytes, identity: str, out: Path) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            mpath = Path(tmp) / "manifest.json"
            mpath.write_bytes(manifest)
            argv = ["skopeo", "standalone-sign", "-o", str(out)]
            if self.passphrase_file:
                argv += ["--passphrase-file", self.passphrase_file]
            out.parent.mkdir(parents=True, exist_ok=True)
            run(
                [*argv, str(mpath), identity, self.fingerprint],
                what=f"signing {identity}",
                env=self.env(),
            )


def sign_file(key: SigningKey, path: Path) -> Path:
    """A detached armored signature `<path>.asc` (the release record's)."""
    sig = path.with_name(path.name + ".asc")
    sig.unlink(missing_ok=True)
    argv = ["gpg", "--batch", "--yes", "--pinentry-mode", "loopback"]
    if key.passphrase_file:
        argv += ["--passphrase-file", key.passphrase_file]
    argv += ["--local-user", key.fingerprint, "--armor", "--detach-sign", "--output", str(sig)]
    run([*argv, str(path)], what=f"signing {path.name}", env=key.env())
    return sig


def verify_file(path: Path, keyring: Path) -> None:
    sig = path.with_name(path.name + ".asc")
    if not sig.is_file():
        raise ReleaseError(f"{path}: no signature {sig.name}; the record is not signed, refuse it")
    argv = ["gpgv", "--keyring", str(keyring.resolve()), str(sig), str(path)]
    if subprocess.run(argv, capture_output=True, check=False).returncode != 0:
        raise ReleaseError(
            f"{path}: its signature {sig.name} does not verify with {keyring}; "
            "the record was changed or signed by another key"
        )


def keyring_fingerprints(keyring: Path) -> list[str]:
    """Primary key fingerprints in a public keyring file."""
    if not keyring.is_file():
        raise ReleaseError(
            f"SIGNING_KEYRING={keyring}: no such file; give the site's public keyring "
            "(gpg --export <fingerprint> > site.gpg)"
        )
    out = run(
        ["gpg", "--batch", "--with-colons", "--show-keys", str(keyring)],
        what=f"reading the keyring {keyring}",
    )
    fprs, primary = [], False
    for line in out.splitlines():
        kind = line.split(":")[0]
        if kind == "pub":
            primary = True
        elif kind == "sub":
            primary = False
        elif kind == "fpr" and primary:
            fprs.append(line.split(":")[9])
            primary = False
    if not fprs:
        raise ReleaseError(f"SIGNING_KEYRING={keyring}: holds no public key")
    return fprs


def verify_manifest(manifest: bytes, identity: str, signature: Path, keyring: Path) -> str:
    """skopeo standalone-verify against every key of `keyring`; returns the signer fingerprint."""
    if not signature.is_file():
        raise ReleaseError(
            f"{identity}: no signature ({signature} is missing): the image is not signed; "
            "refuse it, or sign it with the site key (make release)"
        )
    with tempfile.TemporaryDirectory() as home:
        os.chmod(home, 0o700)
        env = {**os.environ, "GNUPGHOME": home}
        run(["gpg", "--batch", "--import", str(keyring)], what="importing the keyring", env=env)
        mpath = Path(home) / "manifest.json"
        mpath.write_bytes(manifest)
        errors = []
        for fpr in keyring_fingerprints(keyring):
            proc = subprocess.run(
                ["skopeo", "standalone-verify", str(mpath), identity, fpr, str(signature)],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if proc.returncode == 0:
                return fpr
            errors.append(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "")
    raise ReleaseError(
        f"{identity}: signature {signature} does not verify with {keyring} "
        f"({errors[-1] if errors else 'no key'}); the image or its signature was tampered with"
    )


def lookaside_path(root: Path, repo: str, digest: str) -> Path:
    """containers/image's layout: <root>/<repo path>@sha256=<hex>/signature-1."""
    return root / f"{repo}@{digest.replace(':', '=')}" / "signature-1"


def write_node_files(
    out: Path, scope: str, lookaside: str, keyring: Path, site_of: str | None = None
) -> None:
    """What the nodes install: policy.json (reject by default; images under `scope` need a
    signature by `keyring`; `site_of`: a site mirror of that release registry, whose names are
    accepted for the signatures made for the release's) and registries.d (where they are read)."""
    requirement: dict[str, Any] = {
        "type": "signedBy",
        "keyType": "GPGKeys",
        "keyPath": str(keyring),
    }
    if site_of:
        remap = {"type": "remapIdentity", "prefix": scope, "signedPrefix": site_of}
        requirement["signedIdentity"] = remap
    docker = {scope: [requirement]}
    write_json(
        out / "policy.json", {"default": [{"type": "reject"}], "transports": {"docker": docker}}
    )
    (out / "registries.d").mkdir(exist_ok=True)
    (out / "registries.d" / "qwen-npu.yaml").write_text(registries_d(scope, lookaside))


def registries_d(scope: str, lookaside: str) -> str:
    """A registries.d file: where signatures of images under `scope` are read."""
    return f"docker:\n  {scope}:\n    lookaside: {lookaside}\n"


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
