"""Fixtures for the release path: Debian's docker-registry on 127.0.0.1 with TLS (a CA made here)
and basic auth, a site GnuPG key, tiny images standing in for the engine and the sidecar, and a
runner for `python -m tools.release` (a subprocess: the Helm SDK reads the registry's CA from the
process environment, and every failure must be one line on stderr).

The tools come from `make tools-release` (make test installs them); without them these tests fail
and say so.
"""

from __future__ import annotations

import crypt
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

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


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    _need("openssl")
    d = tmp_path_factory.mktemp("pki")

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ossl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=qwen-npu test CA",
    )
    ossl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "srv.key",
        "-out",
        "srv.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ossl(
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.crt",
        "-days",
        "2",
        "-extfile",
        "ext",
    )
    return Pki(d / "ca.crt", d / "srv.crt", d / "srv.key")


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
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "qwen-npu test site <site@test.invalid>",
            "rsa2048",
            "sign",
            "never",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    out = subprocess.run(
        ["gpg", "--batch", "--with-colons", "--list-secret-keys"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    fpr = next(ln.split(":")[9] for ln in out.splitlines() if ln.startswith("fpr:"))
    keyring = home / "site.gpg"
    keyring.write_bytes(
        subprocess.run(
            ["gpg", "--batch", "--export", fpr], env=env, check=True, capture_output=True
        ).stdout
    )
    return SiteKey(home, fpr, keyring)


@dataclass
class RunningRegistry:
    host: str
    root: Path

    def client(self, password: str = PASSWORD, ca: Path | None = None) -> Registry:
        return Registry.login(self.host, USER, password, str(ca) if ca else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def start_registry(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[callable]:  # type: ignore[valid-type]
    _need("docker-registry", "skopeo")
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> RunningRegistry:
        root = tmp_path_factory.mktemp(f"registry-{name}")
        # bcrypt cost 4: the registry checks the password on every request.
        entry = crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
        (root / "htpasswd").write_text(f"{USER}:{entry}\n")
        port = _free_port()
        (root / "config.yml").write_text(
            f"""version: 0.1
log: {{level: error}}
storage:
  filesystem: {{rootdirectory: {root}/data}}
  delete: {{enabled: true}}
http:
  addr: 127.0.0.1:{port}
  tls: {{certificate: {pki.cert}, key: {pki.key}}}
auth:
  htpasswd: {{realm: qwen-npu-test, path: {root}/htpasswd}}
"""
        )
        log = (root / "registry.log").open("wb")
        proc = subprocess.Popen(
            ["docker-registry", "serve", str(root / "config.yml")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(proc)
        deadline = time.monotonic() + 30
        while True:  # the event: the port accepts a connection
            if proc.poll() is not None:
                pytest.fail(f"docker-registry exited: {(root / 'registry.log').read_text()[-400:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("docker-registry did not listen within 30 s")
                time.sleep(0.05)
        return RunningRegistry(f"127.0.0.1:{port}", root)

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def registries(start_registry: callable) -> tuple[RunningRegistry, RunningRegistry]:  # type: ignore[valid-type]
    """The release registry and the site registry (the closed site's)."""
    return start_registry("release"), start_registry("site")


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
def cli(pki: Pki, site_key: SiteKey) -> callable:  # type: ignore[valid-type]
    def run(*args: str, password: str = PASSWORD, env: dict[str, str] | None = None) -> Result:
        full = {
            **os.environ,
            "REGISTRY_USER": USER,
            "REGISTRY_PASSWORD": password,
            "REGISTRY_CA": str(pki.ca),
            "GNUPGHOME": str(site_key.home),
            **(env or {}),
        }
        proc = subprocess.run(
            [sys.executable, "-m", "tools.release", *args],
            cwd=REPO,
            env=full,
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
