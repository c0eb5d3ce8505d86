"""The object store: the few S3 calls sync makes, with the two conditions that make a publish race-free.

A client of boto3 (the ``sync`` extra; why boto3: docs/sync.md, Set-up),
imported only when sync runs. Conditional writes need botocore 1.35.9 or
later (``IfNoneMatch`` on PutObject; ``IfMatch`` from 1.35.99).

``create`` is create-only (``If-None-Match: *``): a key that exists is never
overwritten, the call raises `Exists`. ``swap`` replaces a key only while it
still has the ETag read (``If-Match``), or creates it only while absent; a
moved key raises `Moved`. A retried request whose first try landed answers
412 too; callers compare bytes before they call that a conflict.
"""

from __future__ import annotations

from typing import Any

from retained.sync.state import SyncError

# Seconds to connect and to wait for a reply (a hung endpoint must not hang a cron job).
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
ATTEMPTS = 4


class Exists(SyncError):
    """A create-only write found the key already there; nothing was written."""

    code = "sync_exists"


class Moved(SyncError):
    """A compare-and-swap found the key changed (or created) since it was read; nothing was written."""

    code = "sync_moved"


def parse_url(url: str) -> tuple[str, str]:
    """``(bucket, prefix)`` of ``s3://BUCKET/PREFIX`` (the prefix ends with ``/`` unless empty).

    Raises:
        SyncError: not an s3:// URL with a bucket.
    """
    text = str(url).strip()
    if not text.startswith("s3://") or not text[5:].split("/", 1)[0]:
        raise SyncError(f"remote {url!r}: expected s3://BUCKET/PREFIX (e.g. s3://team-memory/retained)", path="remote")
    bucket, _, prefix = text[5:].partition("/")
    prefix = prefix.strip("/")
    return bucket, (prefix + "/") if prefix else ""


class Remote:
    """One bucket and prefix: ``get``, ``create``, ``swap``, ``listing``; every failure a `SyncError` naming the key."""

    def __init__(self, url: str, *, endpoint_url: str | None = None, client: Any = None) -> None:
        self.url = url
        self.bucket, self.prefix = parse_url(url)
        if client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError as exc:
                raise SyncError("sync needs boto3: pip install 'retained[sync]'", path="remote") from exc
            config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                            retries={"max_attempts": ATTEMPTS, "mode": "standard"})
            client = boto3.client("s3", endpoint_url=endpoint_url or None, config=config)
        self.client = client
        from botocore.exceptions import BotoCoreError, ClientError

        self._errors: tuple[type[BaseException], ...] = (BotoCoreError, ClientError)
        self._client_error = ClientError

    def _fail(self, what: str, key: str, exc: BaseException) -> SyncError:
        return SyncError(f"{what} s3://{self.bucket}/{key} failed: {exc}; check the endpoint, the bucket and the "
                         "credentials (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_PROFILE); nothing was changed locally",
                         path=key)

    def _status(self, exc: BaseException) -> tuple[int, str]:
        if isinstance(exc, self._client_error):
            resp = getattr(exc, "response", {}) or {}
            return int(resp.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0), str(resp.get("Error", {}).get("Code") or "")
        return 0, ""

    def get(self, key: str) -> tuple[bytes, str] | None:
        """``(bytes, etag)`` of the object at ``key``, None when there is none."""
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=key)
            return reply["Body"].read(), reply["ETag"]
        except self._errors as exc:
            status, code = self._status(exc)
            if status == 404 or code in ("NoSuchKey", "NotFound"):
                return None
            raise self._fail("reading", key, exc) from exc

    def create(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> str:
        """Write ``data`` at ``key`` only if no object is there; its ETag.

        Raises:
            Exists: an object is there (possibly this very write, retried after a lost reply).
        """
        try:
            reply = self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*", Metadata=metadata or {})
            return str(reply["ETag"])
        except self._errors as exc:
            status, code = self._status(exc)
            if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise Exists(f"s3://{self.bucket}/{key} already exists; it was not overwritten", path=key) from exc
            raise self._fail("creating", key, exc) from exc

    def swap(self, key: str, data: bytes, etag: str | None) -> str:
        """Replace the object at ``key`` if it still has ``etag`` (None: create it only if absent); the new ETag.

        Raises:
            Moved: the object changed since it was read (another writer), or appeared.
        """
        try:
            condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
            reply = self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **condition)
            return str(reply["ETag"])
        except self._errors as exc:
            status, code = self._status(exc)
            if status in (404, 409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                raise Moved(f"s3://{self.bucket}/{key} changed since it was read; it was not overwritten", path=key) from exc
            raise self._fail("writing", key, exc) from exc

    def listing(self, prefix: str, *, start_after: str = "", limit: int = 1_000_000) -> list[tuple[str, str, int]]:
        """``(key, etag, size)`` of every object under ``prefix`` after ``start_after``, in key order (at most ``limit``)."""
        out: list[tuple[str, str, int]] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, **({"StartAfter": start_after} if start_after else {}))
            for page in pages:
                for obj in page.get("Contents", ()):
                    out.append((obj["Key"], obj.get("ETag", ""), int(obj.get("Size", 0))))
                    if len(out) >= limit:
                        return out
        except self._errors as exc:
            raise self._fail("listing", prefix, exc) from exc
        return out

    def children(self, prefix: str) -> list[str]:
        """The names one level below ``prefix`` (``stores/A/``, ``stores/B/`` -> ``A``, ``B``)."""
        names: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/")
            for page in pages:
                for p in page.get("CommonPrefixes", ()):
                    names.append(p["Prefix"][len(prefix):].rstrip("/"))
        except self._errors as exc:
            raise self._fail("listing", prefix, exc) from exc
        return names
