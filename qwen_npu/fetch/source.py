"""SOURCE: ``modelscope://org/name[@revision]``, ``hf://org/name[@revision]``, ``s3://bucket/prefix``,
``obs://bucket/prefix``.

Why this exists: the CLI, the chart (``model.fetch.source``) and the init container's wait all name
a checkpoint the same way; parsing it once, with one clear line for a typo, keeps them equal. Also
the credentials each scheme reads, and how to name them in an error: the chart tells the fetch
which Secret and key fill each variable (``QWEN_NPU_FETCH_SECRET``, ``QWEN_NPU_FETCH_SECRET_KEYS``),
so a refused token is reported as "Secret hub-token, key token", not as a bare variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from qwen_npu.fetch.errors import EXIT_BAD_INPUT, FetchError

HUBS = ("modelscope", "hf")
STORES = ("s3", "obs")
SCHEMES = HUBS + STORES
# The variables each scheme's client reads (the first is the token of a hub).
CREDENTIAL_ENV: dict[str, tuple[str, ...]] = {
    "hf": ("HF_TOKEN",),
    "modelscope": ("MODELSCOPE_API_TOKEN",),
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "obs": ("OBS_ACCESS_KEY_ID", "OBS_SECRET_ACCESS_KEY"),
}
ENV_SECRET = "QWEN_NPU_FETCH_SECRET"
ENV_SECRET_KEYS = "QWEN_NPU_FETCH_SECRET_KEYS"
# The chart mounts the Secret as files here (not as environment variables: checkov CKV_K8S_35).
ENV_CREDENTIALS_DIR = "QWEN_NPU_FETCH_CREDENTIALS_DIR"

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$")
EXAMPLES = (
    "modelscope://org/name[@revision], hf://org/name[@revision], s3://bucket/prefix, "
    "obs://bucket/prefix"
)


@dataclass(frozen=True)
class Source:
    """A parsed SOURCE. ``repo`` is ``org/name`` (hubs) or the bucket (stores)."""

    scheme: str
    repo: str
    prefix: str = ""
    revision: str | None = None

    @property
    def location(self) -> str:
        """The SOURCE without its revision."""
        tail = f"/{self.prefix}" if self.prefix else ""
        return f"{self.scheme}://{self.repo}{tail}"

    def __str__(self) -> str:
        return self.location + (f"@{self.revision}" if self.revision else "")


def _bad(text: str, why: str) -> FetchError:
    return FetchError(f"SOURCE {text!r}: {why}; expected one of {EXAMPLES}", EXIT_BAD_INPUT)


def parse_source(text: str, revision: str | None = None) -> Source:
    """Parse SOURCE; ``revision`` (the ``--revision`` flag) overrides an ``@revision`` suffix."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise _bad(text, "no scheme")
    if scheme not in SCHEMES:
        raise _bad(text, f"unknown scheme {scheme!r}")
    if scheme in HUBS:
        repo, _, suffix = rest.partition("@")
        repo = repo.strip("/")
        if not _REPO.match(repo):
            raise _bad(text, f"{repo!r} is not org/name")
        rev = revision or suffix or None
        if rev is not None and not _REVISION.match(rev):
            raise _bad(text, f"revision {rev!r} is not a branch, tag or commit id")
        return Source(scheme, repo, "", rev)
    if "@" in rest or revision:
        raise _bad(text, "object stores take no @revision (the objects' ETags are the revision)")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise _bad(text, f"{bucket!r} is not a bucket name")
    return Source(scheme, bucket, prefix.strip("/"), None)


def _secret_keys(env: Mapping[str, str]) -> dict[str, str]:
    pairs = env.get(ENV_SECRET_KEYS, "").split(",")
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def load_credentials(environ: dict[str, str] | None = None) -> None:
    """Set each ``VAR=key`` of QWEN_NPU_FETCH_SECRET_KEYS from the mounted Secret's file ``key``.

    A key missing from the Secret leaves its variable unset, so the client's refusal names it.
    """
    env = os.environ if environ is None else environ
    directory = env.get(ENV_CREDENTIALS_DIR, "")
    if not directory:
        return
    for name, key in _secret_keys(env).items():
        path = os.path.join(directory, key)
        if os.path.isfile(path):
            with open(path) as f:
                env[name] = f.read().strip()


def credential_origin(name: str, environ: Mapping[str, str] | None = None) -> str:
    """How to name variable ``name`` in an error: with its Secret and key when the chart set it."""
    env = os.environ if environ is None else environ
    secret = env.get(ENV_SECRET, "")
    keys = _secret_keys(env)
    if secret and name in keys:
        return f"{name} (Secret {secret!r}, key {keys[name]!r})"
    return name
