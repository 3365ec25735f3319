"""The whole release path against real registries (Debian's docker-registry, TLS, basic auth):
release, the chart installed-rendered from oci://, bundle, bundle-load into a second registry, the
containers policy refusing unsigned and tampered images, and each bad input as one line with
nothing left tagged. Tiny images stand in for the engine and the sidecar (the multi-GB engine goes
through `make release` itself; docs/images.md has its figures).

The tests run in file order on one release (module-scoped fixtures): the tampering comes last.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
import yaml

from tests.release.conftest import PASSWORD, VERSION, Result, one_error_line, tiny_image
from tools.paths import REPO
from tools.release import bundle as bundle_verbs
from tools.release import chart, oci, registry, signing

pytestmark = [pytest.mark.system, pytest.mark.slow]


@pytest.fixture(scope="module")
def release(cli: Any, images: dict[str, str], site_key: Any) -> Callable[..., Result]:
    """`release` of the tiny images to `registry` (`sidecar`: another source for the sidecar)."""

    def run(
        registry: str, out: Path, *extra: str, sidecar: str = "", password: str = PASSWORD
    ) -> Result:
        engine, sidecar = images["engine"], sidecar or images["sidecar"]
        args = ["release", "--registry", registry, "--key", site_key.fingerprint]
        args += ["--out", str(out), "--node-keyring", str(site_key.keyring)]
        args += ["--image", f"engine:{VERSION}={engine}", "--image", f"sidecar:{VERSION}={sidecar}"]
        return cli(*args, *extra, password=password)  # type: ignore[no-any-return]

    return run


@pytest.fixture(scope="module")
def released(
    release: Any, registries: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    rel, _ = registries
    out = tmp_path_factory.mktemp("release-out")
    result = release(f"{rel.host}/qwen", out)
    assert result.code == 0, result.stderr
    record = json.loads((out / VERSION / "record.json").read_text())
    return {"out": out, "record": record, "dir": out / VERSION}


def _policy_pull(reg: Any, ref: str, policy_dir: Path, work: Path) -> CompletedProcess[str]:
    """A pull of `ref` through containers/image with the policy.json and sigstore of
    `policy_dir`: what podman and CRI-O do on every pull."""
    regd, dest = work / "registries.d", work / "pulled"
    regd.mkdir(parents=True, exist_ok=True)
    scope, lookaside = f"{reg.host}/{ref.split('/')[0]}", f"file://{policy_dir / 'sigstore'}"
    (regd / "qwen-npu.yaml").write_text(signing.registries_d(scope, lookaside))
    shutil.rmtree(dest, ignore_errors=True)
    flags = ["--policy", str(policy_dir / "policy.json"), "--registries.d", str(regd), "copy"]
    flags += [*reg.client().skopeo_flags("src-"), f"docker://{reg.host}/{ref}", f"dir:{dest}"]
    return subprocess.run(["skopeo", *flags], capture_output=True, text=True, check=False)


def test_release_pushes_signs_and_pins_every_digest(
    released: dict[str, Any], registries: Any
) -> None:
    rel, _ = registries
    record, client = released["record"], rel.client()
    for name in ("engine", "sidecar"):
        info = record["images"][name]
        assert client.manifest_digest(f"qwen/{name}", VERSION) == info["digest"]
        assert info["reference"] == f"{rel.host}/qwen/{name}:{VERSION}@{info['digest']}"
        assert (released["dir"] / info["signature"]["path"]).is_file()
    assert client.tags("qwen/charts/qwen-npu") == [VERSION]
    assert "this record (record.json.asc)" in record["signing"]["signed"]
    signing.verify_file(released["dir"] / "record.json", released["dir"] / "keys" / "site.gpg")


def test_sbom_lists_debian_and_python_packages_with_versions(released: dict[str, Any]) -> None:
    bom = json.loads((released["dir"] / "sbom" / "engine.cdx.json").read_text())
    purls = {c["purl"] for c in bom["components"]}
    assert "pkg:deb/debian/tini@0.19.0-1+b3?arch=amd64" in purls
    assert "pkg:deb/debian/libc6@2.36-9+deb12u9?arch=amd64" in purls
    assert not any("removed-one" in p for p in purls)  # not installed
    assert "pkg:pypi/fastapi@0.165.0" in purls and "pkg:pypi/engine-stand-in@1.2.15" in purls
    assert (
        bom["metadata"]["component"]["version"] == released["record"]["images"]["engine"]["digest"]
    )


def test_chart_from_oci_verifies_and_renders_pinned_images(
    cli: Any, released: dict[str, Any], registries: Any, tmp_path: Path
) -> None:
    rel, _ = registries
    result = cli(
        "chart-pull",
        "--registry",
        f"{rel.host}/qwen",
        "--version",
        VERSION,
        "--keyring",
        str(released["dir"] / "keys" / "site.gpg"),
        "--out",
        str(tmp_path),
    )
    assert result.code == 0, result.stderr
    pulled = json.loads(result.stdout)
    assert pulled["signed_by"] == "['qwen-npu test site <site@test.invalid>']"
    record = released["record"]
    assert pulled["archive_sha256"] == record["chart"]["archive_sha256"]
    rendered = chart.render_images(Path(pulled["archive"]), {"router": {"enabled": True}})
    engine, sidecar = record["images"]["engine"], record["images"]["sidecar"]
    assert rendered == {engine["reference"], sidecar["reference"]}  # router, helm test included


def test_same_version_again_is_refused_unless_overwrite(
    release: Any, released: dict[str, Any], registries: Any
) -> None:
    rel, _ = registries
    line = one_error_line(release(f"{rel.host}/qwen", released["out"]))
    assert f"release {VERSION} exists" in line and "OVERWRITE=1" in line
    again = release(f"{rel.host}/qwen", released["out"], "--overwrite")
    assert again.code == 0, again.stderr
    client = rel.client()
    assert (
        client.manifest_digest("qwen/engine", VERSION)
        == released["record"]["images"]["engine"]["digest"]
    )
    # the same images give the same digests; the chart package is new: the record says so
    released["record"] = json.loads((released["dir"] / "record.json").read_text())


def test_failed_release_leaves_nothing_tagged(
    release: Any, registries: Any, tmp_path: Path
) -> None:
    rel, _ = registries
    nothing = f"oci:{tmp_path / 'nothing'}:sidecar"
    line = one_error_line(release(f"{rel.host}/broken", tmp_path, sidecar=nothing))
    assert "not an OCI layout" in line
    client = rel.client()
    assert client.tags("broken/engine") == [] and client.tags("broken/charts/qwen-npu") == []


@pytest.mark.parametrize(
    ("registry", "password", "expect"),
    [
        ("127.0.0.1:9/qwen", "s3cret-test", "unreachable"),
        (None, "wrong", "credential of user 'releaser' is refused"),
    ],
)
def test_bad_registry_or_credential_is_one_line(
    release: Any, registries: Any, tmp_path: Path, registry: str | None, password: str, expect: str
) -> None:
    rel, _ = registries
    line = one_error_line(release(registry or f"{rel.host}/badcred", tmp_path, password=password))
    assert expect in line
    assert rel.client().tags("badcred/engine") == []


@pytest.fixture(scope="module")
def bundled(
    cli: Any, released: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, registries: Any
) -> Path:
    _, site = registries
    dest = tmp_path_factory.mktemp("bundles") / "qwen-npu-bundle"
    result = cli(
        "bundle",
        "--record",
        str(released["dir"] / "record.json"),
        "--bundle",
        str(dest),
        "--keyring",
        str(released["dir"] / "keys" / "site.gpg"),
        "--site-registry",
        f"{site.host}/site",
    )
    assert result.code == 0, result.stderr
    return dest


def test_bundle_holds_archives_chart_overlay_sums_readme_and_tarball(
    bundled: Path, released: dict[str, Any]
) -> None:
    record = released["record"]
    for name, info in record["images"].items():
        manifest, _ = oci.read_archive(bundled / "images" / f"{name}.oci.tar")
        assert oci.sha256_digest(manifest) == info["digest"]
    assert (bundled / "chart" / f"qwen-npu-{VERSION}.tgz.prov").is_file()
    sums = (bundled / "SHA256SUMS").read_text()
    for path in bundled.rglob("*"):
        if path.is_file() and path.name != "SHA256SUMS":
            assert f"  {path.relative_to(bundled)}\n" in sums
    overlay = yaml.safe_load((bundled / "values-site.yaml").read_text())
    assert overlay["image"]["engine"]["digests"] == {VERSION: record["images"]["engine"]["digest"]}
    assert "sha256sum -c SHA256SUMS" in (bundled / "README.md").read_text()
    assert (bundled / "images.txt").read_text().split() == [
        i["reference"] for i in record["images"].values()
    ]
    assert bundled.with_name(bundled.name + ".tar").stat().st_size > 0


def test_bundle_load_pushes_and_verifies_end_to_end(
    cli: Any,
    bundled: Path,
    released: dict[str, Any],
    registries: Any,
    site_key: Any,
    tmp_path: Path,
) -> None:
    _, site = registries
    out = tmp_path / "load"
    result = cli(
        "bundle-load",
        "--bundle",
        str(bundled.with_name(bundled.name + ".tar")),
        "--registry",
        f"{site.host}/site",
        "--keyring",
        str(site_key.keyring),
        "--out",
        str(out),
        "--node-keyring",
        str(site_key.keyring),
    )
    assert result.code == 0, result.stderr
    record, client = released["record"], site.client()
    for name, info in record["images"].items():
        assert client.manifest_digest(f"site/{name}", VERSION) == info["digest"]  # end to end
    overlay = yaml.safe_load((out / "values-site.yaml").read_text())
    archive = bundled / "chart" / record["chart"]["archive"]
    rendered = chart.render_images(archive, {**overlay, "router": {"enabled": True}})
    assert rendered == {
        f"{site.host}/site/{n}:{VERSION}@{i['digest']}" for n, i in record["images"].items()
    }
    # a node with the site's policy pulls the engine by its chart reference
    pull = _policy_pull(site, f"site/engine:{VERSION}", out, tmp_path)
    assert pull.returncode == 0, pull.stderr
    # an image the release did not sign is refused under the same policy
    unsigned = oci.read_layout(tiny_image(tmp_path / "unsigned", "engine", "not ours"))
    client.tag("site/extra", unsigned.push(client, "site/extra"), "1")
    refused = _policy_pull(site, "site/extra:1", out, tmp_path)
    assert refused.returncode != 0 and "signature" in refused.stderr.lower(), refused.stderr


@pytest.mark.parametrize("case", ["corrupt", "digest-mismatch", "missing-signature"])
def test_bad_bundle_is_one_line_and_pushes_nothing(
    cli: Any, bundled: Path, registries: Any, site_key: Any, tmp_path: Path, case: str
) -> None:
    _, site = registries
    copy = tmp_path / "bundle"
    shutil.copytree(bundled, copy)
    if case == "corrupt":
        path = copy / "images" / "sidecar.oci.tar"
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        expect = "images/sidecar.oci.tar is corrupt"
    elif case == "digest-mismatch":
        shutil.copy(copy / "images" / "sidecar.oci.tar", copy / "images" / "engine.oci.tar")
        bundle_verbs.write_sums(copy)
        expect = "digest mismatch"
    else:
        next((copy / "sigstore").rglob("signature-1")).unlink()
        bundle_verbs.write_sums(copy)
        expect = "no signature"
    ns = f"bad-{case}"
    line = one_error_line(
        cli(
            "bundle-load",
            "--bundle",
            str(copy),
            "--registry",
            f"{site.host}/{ns}",
            "--keyring",
            str(site_key.keyring),
            "--out",
            str(tmp_path / "out"),
        )
    )
    assert expect in line
    client = site.client()
    assert client.tags(f"{ns}/engine") == [] and client.tags(f"{ns}/charts/qwen-npu") == []


def test_policy_refuses_a_tampered_image(
    released: dict[str, Any], registries: Any, tmp_path: Path
) -> None:
    """Someone re-tags the released engine with other bytes and copies its signature over: the
    signature names the released manifest's digest, so the pull is refused."""
    rel, _ = registries
    client = rel.client()
    ok = _policy_pull(rel, f"qwen/engine:{VERSION}", released["dir"], tmp_path / "ok")
    assert ok.returncode == 0, ok.stderr
    evil = tiny_image(tmp_path / "evil", "engine", "tampered")
    image = oci.read_layout(evil)
    client.tag("qwen/engine", image.push(client, "qwen/engine"), VERSION)
    info = released["record"]["images"]["engine"]
    sigstore = released["dir"] / "sigstore"
    forged = signing.lookaside_path(sigstore, "qwen/engine", image.digest)
    forged.parent.mkdir(parents=True)
    shutil.copy(released["dir"] / info["signature"]["path"], forged)
    bad = _policy_pull(rel, f"qwen/engine:{VERSION}", released["dir"], tmp_path / "bad")
    assert bad.returncode != 0, bad.stdout
    assert "digest" in bad.stderr.lower() or "signature" in bad.stderr.lower(), bad.stderr


def test_model_image_round_trip_restores_the_same_bytes(
    cli: Any, registries: Any, tmp_path: Path
) -> None:
    from fixtures.checkpoints import write_checkpoint

    rel, _ = registries
    ckpt = write_checkpoint(tmp_path / "Qwen3.6-35B-A3B-w8a8", "35B-A3B")
    (ckpt / "model-00001-of-00002.safetensors").write_bytes(bytes(range(256)) * 64)
    ref = f"{rel.host}/qwen/models/qwen3.6-35b-a3b:w8a8"
    flags = "--mamba-ssm-dtype bfloat16"  # as the chart runs the engine on a 910B
    pushed = cli(
        "model-image",
        "--model-dir",
        str(ckpt),
        "--ref",
        ref,
        "--out",
        str(tmp_path),
        "--preflight-args",
        flags,
    )
    assert pushed.code == 0, pushed.stderr
    result = json.loads(pushed.stdout)
    assert result["path"] == "Qwen3.6-35B-A3B-w8a8"
    pulled = cli("model-pull", "--ref", result["reference"], "--dest", str(tmp_path / "node"))
    assert pulled.code == 0, pulled.stderr
    for path in ckpt.rglob("*"):
        if path.is_file():
            copy = tmp_path / "node" / result["path"] / path.relative_to(ckpt)
            assert copy.read_bytes() == path.read_bytes(), path.name
    # a checkpoint preflight refuses is not packed, and nothing is tagged
    (ckpt / "config.json").unlink()
    bad = f"{rel.host}/qwen/models/broken:1"
    line = one_error_line(
        cli("model-image", "--model-dir", str(ckpt), "--ref", bad, "--preflight-args", flags)
    )
    assert "preflight" in line
    assert rel.client().tags("qwen/models/broken") == []


def test_make_release_wires_the_stand_in_engine_tag(
    registries: Any, images: dict[str, str], site_key: Any, release_env: Any, tmp_path: Path
) -> None:
    """`make release` as a user runs it (the builds skipped: the sources are the tiny images).
    Without a Docker engine the engine is the cpu stand-in, published under its own tag."""
    rel, _ = registries
    proc = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "release",
            f"REGISTRY={rel.host}/viamake",
            f"SIGNING_KEY={site_key.fingerprint}",
            "RELEASE_BUILD=0",
            f"ENGINE_SOURCE={images['engine']}",
            f"SIDECAR_SOURCE={images['sidecar']}",
            f"RELEASE_OUT={tmp_path}",
        ],
        cwd=REPO,
        env={**release_env, "DOCKER": "false"},
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((tmp_path / VERSION / "record.json").read_text())
    engine = record["images"]["engine"]
    assert engine["tag"] == f"{VERSION}-cpu-standin" and engine["flavour"] == "cpu"
    client = rel.client()
    assert client.manifest_digest("viamake/engine", f"{VERSION}-cpu-standin") == engine["digest"]
    assert client.tags("viamake/engine") == [f"{VERSION}-cpu-standin"]


def test_rollback_untags_new_tags_and_restores_replaced_ones(
    registries: Any, tmp_path: Path
) -> None:
    """What a failure after the first tag runs (registry.Publisher): a tag this run created goes,
    a tag it moved points back at what it pointed at before."""
    rel, _ = registries
    client = rel.client()
    old = oci.read_layout(tiny_image(tmp_path / "old", "engine", "before"))
    new = oci.read_layout(tiny_image(tmp_path / "new", "engine", "after!"))
    for image in (old, new):
        image.push(client, "rollback/engine")
    client.tag("rollback/engine", old.digest, "moved")
    publisher = registry.Publisher(client)
    publisher.tag("rollback/engine", "moved", new.digest)
    publisher.tag("rollback/engine", "created", new.digest)
    assert client.manifest_digest("rollback/engine", "created") == new.digest
    assert publisher.rollback() == []
    assert client.manifest_digest("rollback/engine", "moved") == old.digest
    assert client.manifest_digest("rollback/engine", "created") is None
