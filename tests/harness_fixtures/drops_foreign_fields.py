"""Broken: acknowledges every write but keeps only the fields it models, dropping the rest."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, main


class DropsForeignFields(FakeStore):
    def write(self, text: str, kind: str, fields: dict[str, Any] | None, *args: Any) -> dict[str, Any]:
        return super().write(text, kind, None, *args)


if __name__ == "__main__":
    main(DropsForeignFields)
