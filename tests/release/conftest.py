"""Fixtures for the release path: Debian's docker-registry on 127.0.0.1 with TLS (a CA made here)
and basic auth, a site GnuPG key, tiny images standing in for the engine and the sidecar, and a
runner for `python -m tools.release` (a subprocess: the Helm SDK reads the registry's CA from the
process environment, and every failure must be one line on stderr).

The tools come from `make tools-release` (make test installs them); without them these tests fail
and say so.
"""

from __future__ import annotations

import crypt
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from qwen_npu import processes
from tools.paths import REPO
from tools.release import oci
from tools.release.registry import Registry
from tools.versions import read_versions

USER, PASSWORD = "releaser", "s3cret-test"
VERSION = read_versions()["QWEN_NPU_VERSION"]  # the release the chart and images carry

DPKG_STATUS = b"""Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u9

Package: tini
Status: install ok installed
Architecture: amd64
Version: 0.19.0-1+b3

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
"""


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `make tools-release` (make test does)")


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA (ca.crt) and the registries' certificate for 127.0.0.1 (srv.crt, srv.key)."""
    _need("openssl")
    d = tmp_path_factory.mktemp("pki")

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    key = ["-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout"]
    ossl("req", "-x509", *key, "ca.key", "-out", "ca.crt", "-subj", "/CN=qwen-npu test CA")
    ossl("req", *key, "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ca = ["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-extfile", "ext"]
    ossl("x509", "-req", "-in", "srv.csr", *ca, "-out", "srv.crt", "-days", "2")
    return d


@dataclass
class SiteKey:
    home: Path
    fingerprint: str
    keyring: Path


@pytest.fixture(scope="session")
def site_key(tmp_path_factory: pytest.TempPathFactory) -> SiteKey:
    _need("gpg", "gpgv")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}

    def gpg(*args: str) -> bytes:
        return subprocess.run(
            ["gpg", "--batch", *args], env=env, check=True, capture_output=True
        ).stdout

    gpg(
        "--passphrase",
        "",
        "--quick-gen-key",
        "qwen-npu test site <site@test.invalid>",
        "rsa2048",
        "sign",
        "never",
    )
    out = gpg("--with-colons", "--list-secret-keys").decode()
    fpr = next(ln.split(":")[9] for ln in out.splitlines() if ln.startswith("fpr:"))
    keyring = home / "site.gpg"
    keyring.write_bytes(gpg("--export", fpr))
    return SiteKey(home, fpr, keyring)


@dataclass
class RunningRegistry:
    host: str
    ca: Path

    def client(self, password: str = PASSWORD) -> Registry:
        return Registry.login(self.host, USER, password, str(self.ca))


@pytest.fixture(scope="session")
def registries(
    tmp_path_factory: pytest.TempPathFactory, pki: Path
) -> Iterator[tuple[RunningRegistry, RunningRegistry]]:
    """The release registry and the site registry (the closed site's): TLS and basic auth."""
    _need("docker-registry", "skopeo")
    procs: list[subprocess.Popen[bytes]] = []
    running = []
    for name in ("release", "site"):
        root = tmp_path_factory.mktemp(f"registry-{name}")
        # bcrypt cost 4: the registry checks the password on every request.
        entry = crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
        (root / "htpasswd").write_text(f"{USER}:{entry}\n")
        port = processes.free_port()
        (root / "config.yml").write_text(
            f"""version: 0.1
log: {{level: error}}
storage:
  filesystem: {{rootdirectory: {root}/data}}
  delete: {{enabled: true}}
http:
  addr: 127.0.0.1:{port}
  tls: {{certificate: {pki / "srv.crt"}, key: {pki / "srv.key"}}}
auth:
  htpasswd: {{realm: qwen-npu-test, path: {root}/htpasswd}}
"""
        )
        log = root / "registry.log"
        cmd = ["docker-registry", "serve", str(root / "config.yml")]
        procs.append(processes.start(cmd, log=log))
        listening = functools.partial(processes.listening, port)
        processes.wait_until(listening, what="docker-registry", proc=procs[-1], log=log)
        running.append(RunningRegistry(f"127.0.0.1:{port}", pki / "ca.crt"))
    yield running[0], running[1]
    for proc in procs:
        processes.stop(proc)


def tiny_image(root: Path, name: str, marker: str) -> Path:
    """An image from scratch with what an SBOM reads: dpkg's status and one dist-info."""
    meta = f"Metadata-Version: 2.1\nName: {name}-stand-in\nVersion: 1.2.{len(marker)}\n".encode()
    site = "opt/venv/lib/python3.11/site-packages"
    oci.build_image(
        root,
        name,
        [
            {"var/lib/dpkg/status": DPKG_STATUS},
            {
                f"{site}/{name}_stand_in-1.2.{len(marker)}.dist-info/METADATA": meta,
                f"{site}/fastapi-0.165.0.dist-info/METADATA": b"Name: fastapi\nVersion: 0.165.0\n",
                f"etc/{name}": marker.encode(),
            },
        ],
        labels={"io.qwen-npu.flavour": "test"},
    )
    return root


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("images")
    return {
        name: f"oci:{tiny_image(base / name, name, name + ' stand-in')}:{name}"
        for name in ("engine", "sidecar")
    }


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def release_env(pki: Path, site_key: SiteKey) -> dict[str, str]:
    """The environment of a release run: the registries' user and CA, the site key's GnuPG home."""
    return {
        **os.environ,
        "REGISTRY_USER": USER,
        "REGISTRY_PASSWORD": PASSWORD,
        "REGISTRY_CA": str(pki / "ca.crt"),
        "GNUPGHOME": str(site_key.home),
    }


@pytest.fixture(scope="session")
def cli(release_env: dict[str, str]) -> Callable[..., Result]:
    def run(*args: str, password: str = PASSWORD) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "tools.release", *args],
            cwd=REPO,
            env={**release_env, "REGISTRY_PASSWORD": password},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


def one_error_line(result: Result) -> str:
    """The failure's stderr: exactly one error line, no traceback."""
    assert result.code == 1, (result.code, result.stderr)
    errors = [ln for ln in result.stderr.splitlines() if "level=ERROR" in ln]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]
