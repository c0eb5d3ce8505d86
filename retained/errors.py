"""Every exception retained raises, each with a stable ``code``.

A caller handles errors by ``code`` (the MCP server passes it to the client
unchanged); the message says what failed, where, what was found against what
was expected, and what to do. Messages never contain a caller's values when
those could be secret: they name the field instead.
"""

from __future__ import annotations

from typing import Any


class RetainedError(Exception):
    """Base of every retained error; ``code`` is stable, ``fields`` are facts."""

    code = "error"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields
        for name, value in fields.items():
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        for name, value in self.fields.items():
            if isinstance(value, (str, int, float, bool)) or value is None:
                out[name] = value
        return out


class InvalidRecord(RetainedError):
    """Raised before anything is written (the log is untouched): a field's value cannot be stored byte-exact."""

    code = "invalid_argument"


class ReservedField(InvalidRecord):
    """A caller tried to set a field the store owns (seq, hash, ts, client, ...). The log is untouched."""

    code = "reserved_field"


class RecordTooLarge(InvalidRecord):
    """The record's canonical line is over ``record_bytes_max``. The log is untouched."""

    code = "too_large"


# How a user raises the record limit, named in RecordTooLarge's message: the
# setting the command line and the MCP server read, the argument in Python.
RECORD_LIMIT_SETTING = "RETAINED_RECORD_BYTES_MAX for the command line and the MCP server, record_bytes_max= in Python"


class NotFound(RetainedError):
    """A seq named by the caller does not exist (or is not a chained record)."""

    code = "not_found"


class OpIdConflict(InvalidRecord):
    """A client_op_id names an earlier record whose content differs from this one's.

    Nothing was written for the request; ``seq`` and ``hash`` name the first
    record. A retry resends the same content; a new record takes a new id.
    """

    code = "conflict"


class RecordDamaged(NotFound):
    """A seq asked for is claimed only by a damaged line (it fails to parse or verify): the record cannot be read.

    The line is kept in place and reported by verify; ``offset`` and ``problem`` say where and what.
    """

    code = "record_damaged"


class LockTimeout(RetainedError):
    """Another writer held the store's lock for longer than ``lock_wait_s``.

    Nothing was written; retrying later is safe (use client_op_id to make a
    retry idempotent).
    """

    code = "store_busy"


class WriteFailed(RetainedError):
    """The append's write or fsync failed; no acknowledgement was given.

    Bytes may or may not be in the file: an unterminated tail is set aside by
    the next append, a complete line stays and is linked. The handle that saw
    the failure is unusable until reopened.
    """

    code = "write_failed"


class ReadBackMismatch(WriteFailed):
    """The bytes read back after fsync differ from the bytes written.

    No acknowledgement was given; the handle is unusable until reopened.
    """

    code = "readback_mismatch"


class LogUnusable(RetainedError):
    """A previous write or fsync failed on this handle; reopen the log to go on."""

    code = "log_unusable"


class StoreDamaged(RetainedError):
    """The store cannot be opened at all (e.g. the log path is a directory)."""

    code = "store_damaged"


class SecretDetected(InvalidRecord):
    """The write guard found a credential; nothing was written.

    ``path`` names the field and ``kind`` the credential type; the value itself
    never appears in the error.
    """

    code = "secret_detected"


class EmbedError(RetainedError):
    """The optional embedder failed. Nothing in the log depends on it.

    Writes are unaffected; search answers lexically and says why.
    """

    code = "embed_failed"


class EmbedConfigError(EmbedError):
    """The embedder settings cannot work (unknown URL path, empty model name).

    Raised when the client is constructed; no request was sent.
    """

    code = "embed_config"


class EmbedUnavailable(EmbedError):
    """The embedder could not be reached or answered with an HTTP error."""

    code = "embed_unavailable"


class EmbedTimeout(EmbedUnavailable):
    """The embedder did not connect or answer within its timeout."""

    code = "embed_timeout"


class EmbedBadResponse(EmbedError):
    """The embedder answered, but not with the vectors asked for.

    Wrong count, wrong dimension, a non-numeric or non-finite value, or a body
    that is not the protocol's JSON; nothing was stored.
    """

    code = "embed_bad_response"


class EmbedCircuitOpen(EmbedError):
    """The circuit breaker is open after repeated failures; no request was sent."""

    code = "embed_circuit_open"


class VectorsUnavailable(RetainedError):
    """Vector math needs numpy, which is not installed (``pip install 'retained[vectors]'``)."""

    code = "vectors_unavailable"


class ImportRefused(InvalidRecord):
    """The import file has bad lines; nothing was written. ``line`` is the first bad line."""

    code = "invalid_argument"


class SourceChainBroken(RetainedError):
    """An export's chain does not verify (tampered or damaged); nothing was written."""

    code = "chain_broken"


class PathRefused(InvalidRecord):
    """A path given for the store to write cannot be used (it exists, or lies inside the store); nothing was written."""

    code = "invalid_argument"


class ExportRefused(RetainedError):
    """The log has verify findings; nothing was exported (``force`` exports the valid records anyway)."""

    code = "verify_failed"


class BackupRefused(RetainedError):
    """The backup destination is unsafe or already holds a backup; nothing was copied."""

    code = "invalid_argument"


class HookSetupRefused(RetainedError):
    """A host's settings file cannot take the hook (not a JSON object, hooks misshapen), or the hook is missing.

    The settings file is left as it was.
    """

    code = "invalid_argument"


class BackupFailed(RetainedError):
    """The copy did not verify against the source head; the copy is left for inspection."""

    code = "backup_failed"


class NoStore(RetainedError):
    """The directory given holds no store (nothing was written there yet), or is not a directory.

    Nothing was read or written. The first write creates a store in a
    directory that does not exist yet.
    """

    code = "no_store"


class LinkRefused(StoreDamaged):
    """A name in the store directory is a symbolic link; retained opens no store file through one.

    Nothing was read or written through it; its target is untouched. Replace
    the link with the file itself (or remove it) and retry.
    """

    code = "symlink_refused"


class InvariantBroken(RetainedError):
    """A check of retained's own bookkeeping failed: a bug in retained, not bad input.

    Raised where an invariant is established (an I2 accounting identity, the
    recovery table picking one row) instead of an ``assert``, which ``python
    -O`` would strip. Nothing was acknowledged on the way; please report it
    with the message.
    """

    code = "internal_invariant"
