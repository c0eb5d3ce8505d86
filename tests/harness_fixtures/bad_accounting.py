"""Broken: search reports only what it returned, hiding what it left out."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, main


class BadAccounting(FakeStore):
    def search(self, query: str, k: int, max_tokens: int | None = None) -> dict[str, Any]:
        result = super().search(query, k, max_tokens)
        result["total_matches"] = result["returned"]
        result["left_out"] = {key: 0 for key in result["left_out"]}
        return result


if __name__ == "__main__":
    main(BadAccounting)
