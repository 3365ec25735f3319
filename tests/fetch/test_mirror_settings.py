"""Mirror settings the clients read: MODELSCOPE_DOMAIN, and a private CA through ``--ca-bundle``.

The HTTPS hub's certificate is signed by a CA made here (``cryptography``); the fetch trusts it
only through ``--ca-bundle``, which reaches every client (httpx: SSL_CERT_FILE, requests:
REQUESTS_CA_BUNDLE, botocore: AWS_CA_BUNDLE).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fixtures.hubserver import Hub, Repo
from tests.fetch.conftest import RunFetch, error_line, repo_files


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@pytest.fixture
def https_hub(tmp_path: Path) -> Iterator[tuple[Hub, Path]]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("qwen-npu test CA"))
        .issuer_name(_name("qwen-npu test CA"))
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = tmp_path / "ca.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "server.pem").write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem")
    with Hub({"org/model": Repo(repo_files())}, tls=context) as hub:
        yield hub, ca_pem


def test_should_honour_modelscope_domain(
    run_fetch: RunFetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Hub({"org/model": Repo(repo_files())}) as hub:
        monkeypatch.setenv("MODELSCOPE_DOMAIN", hub.url)  # the deprecated name, still honoured
        code, _, err = run_fetch("modelscope://org/model", str(tmp_path / "m"))
        assert code == 0, err
        assert sum(hub.reads.values()) == len(hub.repos["org/model"].files)


def test_should_trust_private_ca_only_through_ca_bundle(
    https_hub: tuple[Hub, Path],
    run_fetch: RunFetch,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub, ca_pem = https_hub
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", hub.url)
    # Without the bundle: the certificate is refused, retried, then one line.
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    code, _, err = run_fetch("hf://org/model", str(tmp_path / "a"), "--attempts", "1")
    assert code == 1 and "CERTIFICATE_VERIFY_FAILED" in error_line(err)
    code, _, err = run_fetch(
        "modelscope://org/model", str(tmp_path / "b"), "--ca-bundle", str(ca_pem)
    )
    assert code == 0, err
    # Hugging Face's client keeps one httpx session per process (made with the CAs it saw first):
    # a fresh one, as a Job's process has.
    huggingface_hub.close_session()
    try:
        code, _, err = run_fetch("hf://org/model", str(tmp_path / "c"), "--ca-bundle", str(ca_pem))
        assert code == 0, err
    finally:
        huggingface_hub.close_session()  # the variables themselves: restored by conftest._isolated
    code, _, err = run_fetch("hf://org/model", str(tmp_path / "d"), "--ca-bundle", "/no/such.pem")
    assert code == 2 and "--ca-bundle /no/such.pem: no such file" in error_line(err)
