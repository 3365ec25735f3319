"""A small OCI distribution client (standard library only): the registry calls a release needs.

Why our own and not `skopeo copy`: a release pushes manifests by digest first (untagged) and tags
them only once every image, signature and the chart are in place, so a failed release leaves
nothing tagged as the release; and it checks every digest the registry answers against the bytes
it sent. skopeo (containers/image) still does what it is the reference for: converting local
images to OCI layouts, signing and verifying signatures, and policy-checked pulls (signing.py).

Auth: HTTP basic (Distribution's htpasswd) and the bearer-token challenge (ghcr, Harbor, Quay).
TLS: the system's CAs, or one CA file (REGISTRY_CA) for a site registry with its own CA.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tools.release import ReleaseError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
CHUNK = 1 << 20


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Target:
    """`host[:port]/namespace` (make's REGISTRY): where the images and the chart go."""

    host: str
    namespace: str

    @classmethod
    def parse(cls, value: str) -> Target:
        text = value.strip().removeprefix("oci://").removeprefix("docker://").strip("/")
        host, _, namespace = text.partition("/")
        if not host or ("." not in host and ":" not in host and host != "localhost"):
            raise ReleaseError(
                f"REGISTRY={value!r} is not host[:port]/namespace; "
                "set REGISTRY=registry.example:5000/qwen-npu"
            )
        return cls(host, namespace)

    def repo(self, name: str) -> str:
        """The repository path inside the registry (no host)."""
        return f"{self.namespace}/{name}" if self.namespace else name

    def ref(self, name: str) -> str:
        """The full repository reference, host included."""
        return f"{self.host}/{self.repo(name)}"

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}" if self.namespace else self.host


@dataclass
class Credentials:
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_env(cls, host: str) -> Credentials:
        """REGISTRY_USER/REGISTRY_PASSWORD, else REGISTRY_AUTH_FILE (containers' auth.json)."""
        user, password = os.environ.get("REGISTRY_USER"), os.environ.get("REGISTRY_PASSWORD")
        if user:
            return cls(user, password or "")
        auth_file = os.environ.get("REGISTRY_AUTH_FILE")
        if not auth_file:
            return cls()
        try:
            auths = json.loads(Path(auth_file).read_text()).get("auths", {})
        except (OSError, ValueError) as exc:
            raise ReleaseError(
                f"REGISTRY_AUTH_FILE={auth_file}: unreadable ({exc}); "
                "point it at an auth.json written by `podman login` or `skopeo login`"
            ) from None
        entry = auths.get(host) or auths.get(f"https://{host}")
        if not entry or "auth" not in entry:
            return cls()
        user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        return cls(user, password)


@dataclass
class Registry:
    """One registry host: ping, manifests, blobs, tags, all with digests checked."""

    host: str
    credentials: Credentials = field(default_factory=Credentials)
    ca_file: str | None = None
    timeout: float = 60.0
    _tokens: dict[str, str] = field(default_factory=dict, repr=False)
    _ssl: ssl.SSLContext | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, host: str) -> Registry:
        return cls(host, Credentials.from_env(host), os.environ.get("REGISTRY_CA") or None)

    # -- transport -----------------------------------------------------------------------------

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            if self.ca_file and not Path(self.ca_file).is_file():
                raise ReleaseError(
                    f"REGISTRY_CA={self.ca_file}: no such file; give the registry CA's PEM file"
                )
            self._ssl = ssl.create_default_context(cafile=self.ca_file)
        return self._ssl

    def _basic(self) -> str | None:
        if self.credentials.username is None:
            return None
        pair = f"{self.credentials.username}:{self.credentials.password or ''}"
        return "Basic " + base64.b64encode(pair.encode()).decode()

    def _open(self, req: urllib.request.Request) -> Any:
        try:
            return urllib.request.urlopen(req, timeout=self.timeout, context=self._context())
        except urllib.error.HTTPError:
            raise
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise ReleaseError(
                    f"registry {self.host}: its TLS certificate is not trusted "
                    f"({reason.verify_message}); set REGISTRY_CA=<the registry's CA file>"
                ) from None
            raise ReleaseError(
                f"registry {self.host} unreachable ({reason}); check REGISTRY and that the "
                "registry runs and answers on that port"
            ) from None
        except (TimeoutError, ConnectionError) as exc:
            raise ReleaseError(
                f"registry {self.host} unreachable ({exc}); check REGISTRY and the network"
            ) from None

    def _token(self, challenge: str, scope: str) -> str:
        params = dict(
            part.split("=", 1)
            for part in challenge.removeprefix("Bearer ").split(",")
            if "=" in part
        )
        params = {k.strip(): v.strip().strip('"') for k, v in params.items()}
        query = {"service": params.get("service", ""), "scope": scope}
        url = params["realm"] + "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url)
        basic = self._basic()
        if basic:
            req.add_header("Authorization", basic)
        try:
            with self._open(req) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise self._auth_error(exc.code) from None
        return str(body.get("token") or body.get("access_token"))

    def _auth_error(self, code: int) -> ReleaseError:
        who = self.credentials.username
        if who is None:
            return ReleaseError(
                f"registry {self.host}: authentication required (HTTP {code}) and no credential "
                "given; set REGISTRY_USER and REGISTRY_PASSWORD, or REGISTRY_AUTH_FILE"
            )
        return ReleaseError(
            f"registry {self.host}: the credential of user {who!r} is refused (HTTP {code}); "
            "check REGISTRY_USER/REGISTRY_PASSWORD (or REGISTRY_AUTH_FILE)"
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        repo: str = "",
        headers: dict[str, str] | None = None,
        data: bytes | IO[bytes] | None = None,
        ok: tuple[int, ...] = (200,),
        absolute: str | None = None,
    ) -> Any:
        """One call; returns the open response (status in `ok`), or None on 404 when 404 in ok."""
        url = absolute or f"https://{self.host}{path}"
        scope = f"repository:{repo}:pull,push" if repo else "registry:catalog:*"
        for attempt in (0, 1):
            req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
            token = self._tokens.get(scope)
            auth = f"Bearer {token}" if token else self._basic()
            if auth:
                req.add_header("Authorization", auth)
            try:
                resp = self._open(req)
            except urllib.error.HTTPError as exc:
                challenge = exc.headers.get("WWW-Authenticate", "")
                if exc.code == 401 and challenge.startswith("Bearer") and attempt == 0:
                    self._tokens[scope] = self._token(challenge, scope)
                    if hasattr(data, "seek"):
                        data.seek(0)  # type: ignore[union-attr]
                    continue
                if exc.code in ok:
                    return exc
                if exc.code in (401, 403):
                    raise self._auth_error(exc.code) from None
                detail = exc.read().decode(errors="replace").strip().replace("\n", " ")[:200]
                raise ReleaseError(
                    f"registry {self.host}: {method} {urllib.parse.urlsplit(url).path} answered "
                    f"HTTP {exc.code} ({detail}); check the registry's log"
                ) from None
            if resp.status not in ok:
                raise ReleaseError(
                    f"registry {self.host}: {method} {path} answered HTTP {resp.status}"
                )
            return resp
        raise ReleaseError(f"registry {self.host}: the token it issued is refused; check the user")

    # -- the calls ------------------------------------------------------------------------------

    def ping(self) -> None:
        """GET /v2/ with the credential: reachable, speaks OCI distribution, accepts us."""
        with self.request("GET", "/v2/"):
            pass

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """The digest a tag (or digest) resolves to, None when absent."""
        resp = self.request(
            "HEAD",
            f"/v2/{repo}/manifests/{reference}",
            repo=repo,
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
            ok=(200, 404),
        )
        with resp:
            if resp.status == 404:
                return None
            digest = resp.headers.get("Docker-Content-Digest")
        if digest:
            return str(digest)
        body, _ = self.get_manifest(repo, reference)
        return sha256_digest(body)

    def get_manifest(self, repo: str, reference: str) -> tuple[bytes, str]:
        with self.request(
            "GET",
            f"/v2/{repo}/manifests/{reference}",
            repo=repo,
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        ) as resp:
            body = resp.read()
            media_type = resp.headers.get("Content-Type", "").split(";")[0]
        if reference.startswith("sha256:") and sha256_digest(body) != reference:
            raise ReleaseError(
                f"registry {self.host}: {repo}@{reference} answered a manifest whose digest is "
                f"{sha256_digest(body)}: digest mismatch; the registry's copy is not the release's"
            )
        return body, media_type

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        """PUT a manifest under a digest (untagged) or a tag; returns the checked digest."""
        digest = sha256_digest(body)
        with self.request(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            repo=repo,
            headers={"Content-Type": media_type},
            data=body,
            ok=(200, 201),
        ) as resp:
            answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise ReleaseError(
                f"registry {self.host}: {repo}:{reference} stored as {answered}, sent {digest}: "
                "digest mismatch; the registry rewrote the manifest"
            )
        return digest

    def blob_exists(self, repo: str, digest: str) -> bool:
        with self.request("HEAD", f"/v2/{repo}/blobs/{digest}", repo=repo, ok=(200, 404)) as resp:
            return bool(resp.status == 200)

    def upload_blob(self, repo: str, digest: str, size: int, stream: IO[bytes]) -> bool:
        """Monolithic upload (POST, then PUT ?digest=); False when the blob was already there."""
        if self.blob_exists(repo, digest):
            return False
        with self.request(
            "POST", f"/v2/{repo}/blobs/uploads/", repo=repo, ok=(202,), data=b""
        ) as resp:
            location = resp.headers["Location"]
        url = urllib.parse.urljoin(f"https://{self.host}/", location)
        sep = "&" if "?" in url else "?"
        with self.request(
            "PUT",
            "",
            repo=repo,
            absolute=f"{url}{sep}digest={urllib.parse.quote(digest)}",
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            data=stream,
            ok=(201,),
        ):
            pass
        return True

    def get_blob(self, repo: str, digest: str) -> bytes:
        with self.request("GET", f"/v2/{repo}/blobs/{digest}", repo=repo) as resp:
            body: bytes = resp.read()
        if sha256_digest(body) != digest:
            raise ReleaseError(f"registry {self.host}: blob {repo}@{digest}: digest mismatch")
        return body

    def tags(self, repo: str) -> list[str]:
        with self.request("GET", f"/v2/{repo}/tags/list", repo=repo, ok=(200, 404)) as resp:
            if resp.status == 404:
                return []
            return list(json.loads(resp.read()).get("tags") or [])

    def delete_manifest(self, repo: str, digest: str) -> bool:
        """DELETE by digest (removes its tags); False when the registry does not allow deletes."""
        with self.request(
            "DELETE", f"/v2/{repo}/manifests/{digest}", repo=repo, ok=(202, 404, 405)
        ) as resp:
            return bool(resp.status == 202)
