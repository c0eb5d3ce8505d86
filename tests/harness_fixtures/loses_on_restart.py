"""Broken: acknowledges from memory and writes to the file only on a clean shutdown."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, main


class LosesOnRestart(FakeStore):
    buffered = b""

    def data(self) -> bytes:
        return super().data() + self.buffered  # reads see the buffer, the file does not

    def append(self, fields: dict[str, Any]) -> dict[str, Any]:
        data = self.data()
        record, line = self.build(fields, data)
        self.buffered += line
        return self.proof(record, len(data), len(line))

    def shutdown(self) -> None:
        if self.buffered:
            with open(self.path, "ab") as handle:
                handle.write(self.buffered)


if __name__ == "__main__":
    main(LosesOnRestart)
