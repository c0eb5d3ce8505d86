"""Broken: writes nothing on bad input, but crashes instead of saying why (the client sees a bare error)."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, Refused, main


class CrashesOnBadInput(FakeStore):
    def validate(self, fields: dict[str, Any]) -> None:
        try:
            super().validate(fields)
        except Refused:
            raise RuntimeError() from None  # not a ToolError: MCPServer reports only that the tool failed


if __name__ == "__main__":
    main(CrashesOnBadInput)
