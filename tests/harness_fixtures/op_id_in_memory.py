"""Broken: remembers client_op_ids only in memory, so a retry after a restart appends again."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, main


class OpIdInMemory(FakeStore):
    seen: dict[str, dict[str, Any]]

    def find_op(self, client_op_id: str) -> dict[str, Any] | None:
        return getattr(self, "seen", {}).get(client_op_id)

    def write(self, text: str, kind: str, fields: dict[str, Any] | None, client_op_id: str | None,
              supersedes: list[int] | None) -> dict[str, Any]:
        proof = super().write(text, kind, fields, client_op_id, supersedes)
        if client_op_id is not None and not proof["duplicate"]:
            if not hasattr(self, "seen"):
                self.seen = {}
            self.seen[client_op_id] = {"seq": proof["seq"], "hash": proof["hash"], "prev": proof["prev"],
                                       "ts": proof["ts"]}
        return proof


if __name__ == "__main__":
    main(OpIdInMemory)
