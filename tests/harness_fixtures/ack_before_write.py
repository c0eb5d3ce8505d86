"""Broken: acknowledges a write with a proof, and only writes the line when the next write comes."""

from __future__ import annotations

from typing import Any

from fake_retained import FakeStore, main


class AckBeforeWrite(FakeStore):
    pending = b""

    def data(self) -> bytes:
        return super().data() + self.pending  # it answers reads as if the line were there

    def flush(self) -> None:
        if self.pending:
            with open(self.path, "ab") as handle:
                handle.write(self.pending)
            self.pending = b""

    def append(self, fields: dict[str, Any]) -> dict[str, Any]:
        self.flush()
        data = self.data()
        record, line = self.build(fields, data)
        self.pending = line  # "it will be written"; the reply goes out first
        return self.proof(record, len(data), len(line))

    def shutdown(self) -> None:
        self.flush()


if __name__ == "__main__":
    main(AckBeforeWrite)
