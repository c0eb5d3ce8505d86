"""Broken: no lock; each write reads the whole file, works a moment, and rewrites it whole."""

from __future__ import annotations

import os
import time
from typing import Any

from fake_retained import FakeStore, main


class DropsConcurrent(FakeStore):
    def append(self, fields: dict[str, Any]) -> dict[str, Any]:
        data = self.data()
        record, line = self.build(fields, data)
        time.sleep(0.03)  # the read-modify-write window another process can fall into
        temp = self.path.with_suffix(f".tmp-{os.getpid()}")
        temp.write_bytes(data + line)
        os.replace(temp, self.path)
        return self.proof(record, len(data), len(line))


if __name__ == "__main__":
    main(DropsConcurrent)
