"""Adapter for the reference ``@modelcontextprotocol/server-memory`` (npm).

Its store is a JSONL knowledge graph at MEMORY_FILE_PATH: one entity or
relation per line, the whole file rewritten on every change. A memory here is
one entity whose first observation is the text; the entity's name is derived
from the text, and a "kind" maps to the entity type.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import blake3

from ..mcpio import Reply, Server
from .base import Adapter, BadCall, Item, NotApplicable, Written

PACKAGE = "@modelcontextprotocol/server-memory"
NPM_TIMEOUT_S = 300.0
_ENTITY_KEYS = {"name", "entityType", "observations", "type"}


def cache_dir() -> Path:
    """Where the harness keeps its npm install between runs."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "retained-harness" / "server-memory"


def install(prefix: Path, spec: str = PACKAGE) -> Path:
    """Install the package with npm under ``prefix`` (once) and return its entry script."""
    entry = prefix / "node_modules" / PACKAGE / "dist" / "index.js"
    if entry.exists():
        return entry
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise NotApplicable("node and npm are needed to install server-memory and are not on PATH")
    prefix.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(prefix), spec],
            capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise NotApplicable(f"npm install {spec} took over {NPM_TIMEOUT_S:g} s") from exc
    if done.returncode != 0 or not entry.exists():
        tail = " ".join(done.stderr.split())[-300:]
        raise NotApplicable(f"npm install {spec} failed (exit {done.returncode}): {tail}")
    return entry


def installed_version(prefix: Path) -> str | None:
    try:
        meta = json.loads((prefix / "node_modules" / PACKAGE / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(meta.get("version"))


def _name(text: str) -> str:
    return "h-" + blake3.blake3(text.encode("utf-8")).hexdigest()[:20]


def _lines(data: bytes) -> list[tuple[int, dict[str, Any] | None]]:
    out: list[tuple[int, dict[str, Any] | None]] = []
    offset = 0
    for raw in data.split(b"\n"):
        if raw.strip():
            try:
                obj = json.loads(raw)
            except ValueError:
                obj = None
            out.append((offset, obj if isinstance(obj, dict) else None))
        offset += len(raw) + 1
    return out


class ServerMemoryAdapter(Adapter):
    name = "server-memory"
    env_var = "MEMORY_FILE_PATH"
    file_name = "memory.jsonl"

    def __init__(self, prefix: Path | None = None, spec: str = PACKAGE) -> None:
        self.prefix = prefix or cache_dir()
        self.spec = spec

    def command(self, override: list[str] | None) -> list[str]:
        if override:
            return override
        entry = install(self.prefix, self.spec)
        node = shutil.which("node") or "node"
        return [node, str(entry)]

    def describe(self) -> str:
        version = installed_version(self.prefix)
        return f"{PACKAGE} {version}" if version else PACKAGE

    def env(self, store: Path) -> dict[str, str]:
        return {self.env_var: str(store / self.file_name)}

    async def write(self, server, text, *, kind=None, fields=None, op_id=None) -> Written:
        if op_id is not None:
            raise NotApplicable("create_entities has no client_op_id or other retry token")
        entity: dict[str, Any] = {"name": _name(text), "entityType": kind or "harness-note", "observations": [text]}
        if fields:
            entity.update(fields)
        reply = await server.call("create_entities", {"entities": [entity]})
        return Written(reply.ok, text, proof=None, reply=reply)

    def raw_write(self, text_json: str, extra_json: str | None = None) -> tuple[str, str]:
        extra = f',"x_harness":{extra_json}' if extra_json is not None else ""
        entity = f'{{"name":{text_json},"entityType":"harness-note","observations":[{text_json}]{extra}}}'
        return "create_entities", f'{{"entities":[{entity}]}}'

    async def retry_write(self, server: Server, text: str) -> tuple[Written, Written]:
        """The same create_entities call sent twice, as a client retrying after a lost reply would."""
        first = await self.write(server, text)
        second = await self.write(server, text)
        return first, second

    def _item(self, entity: dict[str, Any]) -> Item:
        observations = entity.get("observations") or [""]
        fields = {key: value for key, value in entity.items() if key not in _ENTITY_KEYS}
        return Item(str(observations[0]), entity.get("entityType"), fields, entity.get("name"))

    async def read_all(self, server) -> list[Item]:
        reply = await server.call("read_graph", {})
        if not reply.ok:
            raise RuntimeError(f"read_graph failed: {reply.brief()}")
        entities = reply.data.get("entities", []) if isinstance(reply.data, dict) else []
        return [self._item(entity) for entity in entities if isinstance(entity, dict)]

    async def read_one(self, server, written) -> Item | None:
        reply = await server.call("open_nodes", {"names": [_name(written.text)]})
        if not reply.ok:
            raise RuntimeError(f"open_nodes failed: {reply.brief()}")
        entities = reply.data.get("entities", []) if isinstance(reply.data, dict) else []
        return self._item(entities[0]) if entities else None

    async def search(self, server, query, k, max_tokens=None):
        raise NotApplicable("search_nodes takes no k and returns every match, with no count of what it left out")

    async def verify(self, server) -> Reply:
        raise NotApplicable("there is no verify tool and the file has no checksums")

    async def alive(self, server) -> Reply:
        return await server.call("read_graph", {})

    def bad_calls(self) -> list[BadCall]:
        return [
            BadCall("entities missing", "create_entities", {}),
            BadCall("entities not a list", "create_entities", {"entities": "nope"}),
            BadCall("entity name not a string", "create_entities",
                    {"entities": [{"name": 5, "entityType": "t", "observations": []}]}),
            BadCall("observation not a string", "create_entities",
                    {"entities": [{"name": "bad", "entityType": "t", "observations": [7]}]}),
            BadCall("observations on an unknown entity", "add_observations",
                    {"observations": [{"entityName": "no-such-entity", "contents": ["x"]}]}),
            BadCall("relation without endpoints", "create_relations", {"relations": [{"from": "a"}]}),
            BadCall("open_nodes names not a list", "open_nodes", {"names": "x"}),
        ]

    def file_texts(self, data: bytes) -> list[str] | None:
        texts = []
        for _, obj in _lines(data):
            if obj and obj.get("type") == "entity" and obj.get("observations"):
                texts.append(str(obj["observations"][0]))
        return texts

    def check_file(self, data: bytes) -> tuple[bool, str]:
        lines = _lines(data)
        bad = [offset for offset, obj in lines if obj is None]
        if bad:
            return False, f"{len(bad)} line(s) are not JSON objects, first at byte {bad[0]}"
        return True, f"{len(lines)} JSON lines, all parse (the format has no checksums)"

    def locate(self, data: bytes, text: str) -> int | None:
        for offset, obj in _lines(data):
            if obj and obj.get("observations") and obj["observations"][0] == text:
                return offset
        return None
