"""Claude Code transcripts read back as capture events: prompts, final replies, the same ids as live capture."""

from __future__ import annotations

import json
from pathlib import Path

from retained import Store
from retained.capture import ledger, transcript
from retained.capture.run import Options, capture
from retained.safety.guard import Guard

SESSION = "11111111-2222-3333-4444-555555555555"


def _line(**fields) -> str:
    base = {"sessionId": SESSION, "cwd": "/work/proj", "version": "2.1.197", "isSidechain": False}
    return json.dumps({**base, **fields})


def write_transcript(path: Path) -> Path:
    lines = [
        json.dumps({"type": "queue-operation", "operation": "enqueue", "sessionId": SESSION, "content": "first"}),
        _line(type="user", promptId="p-1", uuid="u1", message={"role": "user", "content": "what is the port?"}),
        _line(type="assistant", uuid="a1", message={"id": "m1", "role": "assistant",
                                                     "content": [{"type": "text", "text": "Let me look."}]}),
        _line(type="assistant", uuid="a2", message={"id": "m1", "role": "assistant",
                                                     "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]}),
        _line(type="user", promptId="p-1", uuid="u2",
              message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "8443"}]}),
        _line(type="assistant", uuid="a3", message={"id": "m2", "role": "assistant",
                                                     "content": [{"type": "text", "text": "The port is 8443."}]}),
        _line(type="assistant", uuid="s1", isSidechain=True, message={"id": "m9", "content": [{"type": "text", "text": "sub"}]}),
        _line(type="user", promptId="p-2", uuid="u3", message={"role": "user", "content": [{"type": "text", "text": "thanks"}]}),
        _line(type="user", promptId="p-2", uuid="u4", isMeta=True, message={"role": "user", "content": "meta"}),
        "not json at all",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_transcript_gives_each_prompt_and_the_final_reply_of_its_turn(tmp_path: Path):
    path = write_transcript(tmp_path / "projects" / "-work-proj" / f"{SESSION}.jsonl")
    got = [(e.event, e.turn_id, e.turns[0].speaker, e.turns[0].text) for e in transcript.read(path)]
    assert got == [
        ("UserPromptSubmit", "p-1", "user", "what is the port?"),
        ("Stop", "p-1", "assistant", "The port is 8443."),
        ("UserPromptSubmit", "p-2", "user", "thanks"),
    ]


def test_import_twice_or_after_live_capture_records_each_turn_once(tmp_path: Path):
    write_transcript(tmp_path / "projects" / "-work-proj" / f"{SESSION}.jsonl")
    store_dir = tmp_path / "store"
    with Store(store_dir, guard=Guard("redact")) as store:
        live = capture(store, {"hook_event_name": "UserPromptSubmit", "session_id": SESSION, "prompt_id": "p-1",
                               "prompt": "what is the port?", "cwd": str(tmp_path)}, Options())
        assert live["outcome"] == "captured"
        dry = transcript.import_path(store, tmp_path / "projects", dry_run=True)
        assert (dry["turns"], dry["captured"], dry["deduplicated"]) == (3, 2, 1)
        assert len(list(store.log.scan())) == 1  # a dry run writes nothing
        first = transcript.import_path(store, tmp_path / "projects")
        again = transcript.import_path(store, tmp_path / "projects")
        texts = [line.record["text"] for line in store.log.scan()]
    assert (first["captured"], first["deduplicated"], again["captured"], again["deduplicated"]) == (2, 1, 0, 3)
    assert texts == ["what is the port?", "The port is 8443.", "thanks"]
    counts = ledger.status(store_dir)
    assert counts["totals"]["received"] == 7 and counts["adds_up"]
