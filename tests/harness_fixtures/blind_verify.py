"""Broken: verify always reports a clean store."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, main


class BlindVerify(FakeStore):
    def verify(self) -> dict[str, Any]:
        return {"ok": True, "findings": []}


if __name__ == "__main__":
    main(BlindVerify)
