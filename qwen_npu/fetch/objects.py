"""S3 and Huawei OBS buckets through boto3 (OBS speaks the S3 API).

An object store has no commit id: the revision is a digest of every object's key, size and ETag
(and VersionId), and each read asks for that exact object (``IfMatch`` / ``VersionId``), so a
prefix rewritten mid-fetch fails instead of mixing two checkpoints. The ETag is what verifies a
file: an MD5, or the MD5 of the parts' MD5s (part size from part 1's headers). ``s3://`` reads the
standard AWS variables; ``obs://`` reads ``OBS_ACCESS_KEY_ID``, ``OBS_SECRET_ACCESS_KEY``,
``OBS_ENDPOINT`` and ``OBS_REGION``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from qwen_npu.cli_parser import EXIT_BAD_INPUT
from qwen_npu.fetch import source as src
from qwen_npu.fetch.source import FetchError, Listing, RemoteFile, TransientError

_MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")
_MULTI_ETAG = re.compile(r"^[0-9a-f]{32}-[0-9]+$")
AUTH_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}
)
_LOADER: Any = None
RETRY_CODES = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "503", "500"}
)


class ObjectStore:
    """``s3://bucket/prefix`` and ``obs://bucket/prefix``."""

    def __init__(self, source: src.Source, read_timeout: float, connect_timeout: float) -> None:
        self.source = source
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.key_env, self.secret_env = src.CREDENTIAL_ENV[source.scheme]
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            # lazy: an extra's (pyproject.toml); the base install goes without
            import boto3
            import botocore.session
            from botocore.config import Config

            config = Config(
                read_timeout=self.read_timeout,
                connect_timeout=self.connect_timeout,
                retries={"max_attempts": 1, "mode": "standard"},  # the transfer retries
                s3={"addressing_style": os.environ.get("QWEN_NPU_FETCH_S3_ADDRESSING", "auto")},
            )
            kwargs: dict[str, Any] = {"config": config}
            if self.source.scheme == "obs":
                endpoint = os.environ.get("OBS_ENDPOINT", "")
                if not endpoint:
                    raise FetchError(
                        f"{self.source}: OBS_ENDPOINT is not set; set it to the bucket's region "
                        "endpoint, e.g. https://obs.cn-southwest-2.myhuaweicloud.com "
                        "(chart: model.fetch.endpoint)",
                        EXIT_BAD_INPUT,
                    )
                kwargs.update(
                    endpoint_url=endpoint,
                    region_name=os.environ.get("OBS_REGION") or "us-east-1",
                    aws_access_key_id=os.environ.get(self.key_env) or None,
                    aws_secret_access_key=os.environ.get(self.secret_env) or None,
                )
            global _LOADER
            core = botocore.session.Session()  # fresh: credentials are read from the env now
            if _LOADER is None:
                _LOADER = core.get_component("data_loader")
            core.register_component("data_loader", _LOADER)  # botocore's models load once
            session = boto3.session.Session(botocore_session=core)
            self._client = session.client("s3", **kwargs)
        return self._client

    def _error(self, exc: Exception, what: str) -> Exception:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        key, secret = src.credential_origin(self.key_env), src.credential_origin(self.secret_env)
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return FetchError(
                f"{self.source}: no credentials: {key} and {secret} are empty; set them to a key "
                "that can read the bucket (docs/runbook.md 'Rotating credentials')",
                EXIT_BAD_INPUT,
            )
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code in AUTH_CODES or status in (401, 403):
                return FetchError(
                    f"{self.source}: the store refused the key in {key} ({code or status}); put "
                    f"a key that can read the bucket in {key} and {secret} and re-run "
                    "(docs/runbook.md 'Rotating credentials')",
                    EXIT_BAD_INPUT,
                )
            if code == "NoSuchBucket":
                return FetchError(
                    f"{self.source}: no bucket {self.source.repo!r} at the endpoint; check SOURCE",
                    EXIT_BAD_INPUT,
                )
            if code in ("PreconditionFailed", "NoSuchKey", "NoSuchVersion"):
                return FetchError(
                    f"{self.source}: {what} changed or vanished during the fetch ({code}); "
                    "re-run to fetch the new revision once the upload is finished"
                )
            if code in RETRY_CODES or status >= 500 or status == 429:
                return TransientError(f"{what}: {code or status}")
            return FetchError(f"{self.source}: {what}: {code or status}: {exc}")
        if isinstance(exc, BotoCoreError | OSError):
            return TransientError(f"{what}: {type(exc).__name__}: {exc}")
        return exc

    def resolve(self) -> Listing:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = f"{self.source.prefix}/" if self.source.prefix else ""
        files: list[RemoteFile] = []
        digest = hashlib.sha256()
        try:
            versioned = self._versioned()
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.source.repo, Prefix=prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    key = str(obj["Key"])
                    if key.endswith("/"):
                        continue  # a "directory" marker
                    files.append(self._file(key, key[len(prefix) :], obj, versioned))
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "listing") from None
        if not files:
            raise FetchError(
                f"{self.source}: no objects under {prefix or 'the bucket root'!r}; "
                "check the prefix",
                EXIT_BAD_INPUT,
            )
        for f in sorted(files, key=lambda x: x.path):
            digest.update(f"{f.path}\0{f.size}\0{f.expected}\0{f.version}\n".encode())
        return Listing(self.source, f"objects-{digest.hexdigest()[:32]}", files)

    def _versioned(self) -> bool:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from botocore.exceptions import ClientError

        try:
            status = self.client.get_bucket_versioning(Bucket=self.source.repo).get("Status")
        except ClientError as exc:  # OBS answers some accounts' calls with NotImplemented
            if str(exc.response.get("Error", {}).get("Code")) in AUTH_CODES | {"NoSuchBucket"}:
                raise
            return False
        return bool(status == "Enabled")

    def _file(self, key: str, rel: str, obj: dict[str, Any], versioned: bool) -> RemoteFile:
        etag = str(obj.get("ETag", "")).strip('"')
        size = int(obj["Size"])
        version = etag
        if versioned:
            head = self.client.head_object(Bucket=self.source.repo, Key=key)
            version = str(head.get("VersionId") or etag)
        path = src.safe_relpath(rel)
        if _MD5_ETAG.match(etag):
            return RemoteFile(path, size, src.MD5, etag, version=version)
        if _MULTI_ETAG.match(etag):
            part = self.client.head_object(Bucket=self.source.repo, Key=key, PartNumber=1)
            return RemoteFile(path, size, src.MULTIPART, etag, int(part["ContentLength"]), version)
        raise FetchError(
            f"{self.source}: {key}: ETag {etag!r} is neither an MD5 nor a multipart ETag (an "
            "encrypted object?); re-upload it without SSE-KMS/SSE-C or fetch from a hub"
        )

    @contextmanager
    def open(self, listing: Listing, f: RemoteFile, offset: int) -> Iterator[src.Stream]:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from botocore.exceptions import BotoCoreError, ClientError

        key = f"{self.source.prefix}/{f.path}" if self.source.prefix else f.path
        kwargs: dict[str, Any] = {"Bucket": self.source.repo, "Key": key}
        if f.version and f.version != f.expected:
            kwargs["VersionId"] = f.version
        else:
            kwargs["IfMatch"] = f'"{f.expected}"'
        if offset:
            kwargs["Range"] = f"bytes={offset}-"
        try:
            resp = self.client.get_object(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, f.path) from None
        body = resp["Body"]
        start = offset if offset and resp.get("ContentRange") else 0
        try:
            yield src.Stream(start, self._chunks(body, f.path))
        finally:
            body.close()

    def _chunks(self, body: Any, what: str) -> Iterator[bytes]:
        # lazy: an extra's (pyproject.toml); the base install goes without
        from botocore.exceptions import BotoCoreError
        from urllib3.exceptions import HTTPError

        try:
            yield from body.iter_chunks(src.CHUNK)
        except (BotoCoreError, HTTPError, OSError) as exc:
            raise TransientError(f"{what}: read: {type(exc).__name__}: {exc}") from None
