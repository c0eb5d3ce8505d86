"""Broken: stores client_op_id but never looks it up, so a retry appends a second record."""

from __future__ import annotations

from fake_retained import FakeStore, main


class IgnoresOpId(FakeStore):
    def find_op(self, client_op_id: str) -> None:
        return None


if __name__ == "__main__":
    main(IgnoresOpId)
