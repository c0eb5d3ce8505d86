"""Broken: silently keeps only the first 64 KiB of a long text."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, main


class TruncatesLarge(FakeStore):
    def write(self, text: str, *args: Any) -> dict[str, Any]:
        return super().write(text[: 64 * 1024], *args)


if __name__ == "__main__":
    main(TruncatesLarge)
