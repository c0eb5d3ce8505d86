"""Broken: appends after a torn tail without repairing it, gluing the new line onto the torn bytes."""

from __future__ import annotations

from fake_retained import FakeStore, main


class GluesTornTail(FakeStore):
    def recover(self) -> None:
        return None


if __name__ == "__main__":
    main(GluesTornTail)
