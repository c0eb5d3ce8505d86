"""What a probe needs from a server, in the server's own tools and file format.

To probe another server, subclass Adapter and fill in what it has:

- ``env_var``, ``file_name`` (or ``env``/``store_file``): where the server keeps
  its store, so every probe can give it a fresh one and read the file;
- ``write``, ``read_all``, ``read_one``, ``alive``: its own tools for these;
- ``file_texts``, ``check_file``, ``locate``, ``file_record``: how to read its file;
- optionally ``check_proof`` (a write's proof against the file), ``verify`` and
  ``verify_names``, ``search`` (ranked, with accounting), ``bad_calls``.

A method a server has no equivalent for raises NotApplicable with the reason,
and the probes that need it SKIP with that sentence. Register the adapter in
harness/adapters/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..mcpio import Reply, Server


class NotApplicable(Exception):
    """The server has no tool or notion the probe needs; the probe SKIPs with this reason."""


@dataclass
class Written:
    """The outcome of one write as the client saw it."""

    ok: bool
    text: str
    proof: dict[str, Any] | None = None
    duplicate: bool | None = None
    reply: Reply | None = None

    @property
    def error(self) -> str:
        return self.reply.brief() if self.reply is not None else ""


@dataclass
class Item:
    """One stored memory as read back through the server."""

    text: str
    kind: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    key: Any = None


@dataclass
class SearchCount:
    """A search's own accounting: how many it returned, left out, and matched."""

    returned: int
    left_out: int | None
    matched: int | None
    detail: str = ""


@dataclass
class BadCall:
    label: str
    tool: str
    arguments: dict[str, Any]


class Adapter:
    """Maps the probes onto one server's tools. Subclasses override what applies."""

    name = "base"
    env_var = ""
    file_name = ""

    def command(self, override: list[str] | None) -> list[str]:
        if override:
            return override
        raise NotApplicable(f"adapter {self.name} needs --cmd")

    def env(self, store: Path) -> dict[str, str]:
        return {self.env_var: str(store)}

    def store_file(self, store: Path) -> Path:
        return store / self.file_name

    # -- writing and reading through the server ---------------------------

    async def write(
        self,
        server: Server,
        text: str,
        *,
        kind: str | None = None,
        fields: dict[str, Any] | None = None,
        op_id: str | None = None,
    ) -> Written:
        raise NotImplementedError

    async def read_all(self, server: Server) -> list[Item]:
        raise NotImplementedError

    async def read_one(self, server: Server, written: Written) -> Item | None:
        """Read back one written item; by default by scanning everything."""
        return next((item for item in await self.read_all(server) if item.text == written.text), None)

    async def verify(self, server: Server) -> Reply:
        raise NotApplicable("the server has no verify tool")

    def verify_names(self, reply: Reply, item: Item, offset: int) -> str | None:
        raise NotApplicable("the server has no verify tool")

    async def search(self, server: Server, query: str, k: int, max_tokens: int | None = None) -> SearchCount:
        """One ranked search with at most ``k`` results (and a token budget, where the server has one)."""
        raise NotApplicable("the server has no ranked search with a result limit")

    def bad_calls(self) -> list[BadCall]:
        return []

    def raw_write(self, text_json: str, extra_json: str | None = None) -> tuple[str, str]:
        """A write as raw JSON text: ``(tool, arguments)``, the text given as JSON text (it may hold what
        no JSON encoder writes, e.g. a lone surrogate escape) and an optional extra value of any shape."""
        raise NotApplicable("the adapter has no raw form of a write for this server")

    async def alive(self, server: Server) -> Reply:
        """A cheap read that must succeed on a healthy server."""
        raise NotImplementedError

    # -- reading the store file directly ----------------------------------

    def check_proof(self, data: bytes, written: Written) -> tuple[bool, str]:
        """Compare the write's proof with the file's bytes."""
        return False, "the write reply carries no proof (no offset, length or hash) to check against the file"

    def file_texts(self, data: bytes) -> list[str] | None:
        """Every stored text the harness can see in the file, or None if unreadable."""
        raise NotImplementedError

    def check_file(self, data: bytes) -> tuple[bool, str]:
        """Whether the whole file is valid in the server's own format."""
        return True, "no integrity format to check"

    def foreign_line(self) -> bytes:
        return b'{"note":"appended by another program","by":"retained-harness"}\n'

    def file_record(self, data: bytes, text: str) -> dict[str, Any] | None:
        """The stored object holding ``text``, when the format has one per record."""
        return None

    def locate(self, data: bytes, text: str) -> int | None:
        """Byte offset of the line storing ``text``, for tampering."""
        raise NotImplementedError

    def kind_probe_value(self) -> str:
        return "x-harness-unmodelled-kind"
