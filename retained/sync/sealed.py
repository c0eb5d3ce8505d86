"""Client-side encryption: every object sync writes is sealed with a key only the user holds, so the bucket's owner sees ciphertext.

AES-256-GCM from ``cryptography`` (the ``encrypt`` extra: the Python
Cryptographic Authority's library, OpenSSL underneath, the one most Python
projects trust for this). Each object is ``MAGIC``, a random 12-byte nonce,
then the ciphertext with its tag; the object's key (its name in the
bucket) is the associated data, so a sealed segment moved under another
name does not open. A random nonce per write: a key may seal 2**32 objects
before the nonces' birthday bound matters, far past any store's segments.

An object that does not open (another key, not sealed, or changed) raises
`Unreadable`; the runner turns it into a finding for that store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from retained.sync.remote import Remote
from retained.sync.state import SyncError

MAGIC = b"retained-sealed-1\n"
NONCE_BYTES = 12
KEY_BYTES = 32


class Unreadable(SyncError):
    """An object does not open with this key (another key, not sealed, or altered); nothing was written."""

    code = "sync_unreadable"


def read_key(path: str | os.PathLike[str]) -> bytes:
    """The key in ``path``: 64 hex digits (32 bytes), as ``python -c 'import os; print(os.urandom(32).hex())'`` writes.

    Raises:
        SyncError: unreadable, or not 64 hex digits.
    """
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SyncError(f"the key file {path} cannot be read ({exc}); see docs/sync.md, encryption", path="key_file") from exc
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise SyncError(f"the key file {path} must hold 64 hex digits (a 256-bit key); see docs/sync.md, encryption",
                        path="key_file")
    return key


class SealedRemote(Remote):
    """A `Remote` that seals what it writes and opens what it reads (listings are of the sealed objects)."""

    def __init__(self, url: str, key: bytes, **options: Any) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:
            raise SyncError("encrypted sync needs cryptography: pip install 'retained[encrypt]'", path="key_file") from exc
        if len(key) != KEY_BYTES:
            raise SyncError("the sync key must be 32 bytes", path="key_file")
        super().__init__(url, **options)
        self._aead = AESGCM(key)

    def seal(self, key: str, data: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return MAGIC + nonce + self._aead.encrypt(nonce, data, key.encode("utf-8"))

    def open(self, key: str, body: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        if not body.startswith(MAGIC):
            raise Unreadable(f"s3://{self.bucket}/{key} is not sealed: it was published without a key (or by another "
                             "program); every machine on one prefix uses the same key or none", path=key)
        nonce = body[len(MAGIC) : len(MAGIC) + NONCE_BYTES]
        try:
            return bytes(self._aead.decrypt(nonce, body[len(MAGIC) + NONCE_BYTES :], key.encode("utf-8")))
        except InvalidTag as exc:
            raise Unreadable(f"s3://{self.bucket}/{key} does not open with this key: sealed with another key, or "
                             "altered in the bucket", path=key) from exc

    def get(self, key: str) -> tuple[bytes, str] | None:
        got = super().get(key)
        return None if got is None else (self.open(key, got[0]), got[1])

    def create(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> str:
        # The last record's hash is left out of the metadata: the bucket's owner sees sizes and names only.
        return super().create(key, self.seal(key, data), None)

    def swap(self, key: str, data: bytes, etag: str | None) -> str:
        return super().swap(key, self.seal(key, data), etag)
