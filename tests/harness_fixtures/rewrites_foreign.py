"""Broken: each write rewrites the file from the records it understands, dropping foreign lines."""

from __future__ import annotations

import os
from typing import Any

from fake_retained import FakeStore, main

from harness import logcheck


class RewritesForeign(FakeStore):
    def append(self, fields: dict[str, Any]) -> dict[str, Any]:
        handle = self.lock()
        try:
            kept = b"".join(line.raw for line in logcheck.check(self.data()).records)
            record, line = self.build(fields, kept)
            temp = self.path.with_suffix(".tmp")
            temp.write_bytes(kept + line)
            os.replace(temp, self.path)
        finally:
            handle.close()
        return self.proof(record, len(kept), len(line))


if __name__ == "__main__":
    main(RewritesForeign)
