"""Broken: appends the record first and checks the fields afterwards."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, main


class WritesBadInput(FakeStore):
    def write(self, text: str, kind: str, fields: dict[str, Any] | None, client_op_id: str | None,
              supersedes: list[int] | None) -> dict[str, Any]:
        safe = {key: value for key, value in (fields or {}).items() if key not in ("seq", "hash", "prev", "v", "ts")}
        record = {"kind": kind, "text": text[:1000], **safe}
        proof = self.append(record)
        self.validate(dict(fields or {}))
        return proof


if __name__ == "__main__":
    main(WritesBadInput)
