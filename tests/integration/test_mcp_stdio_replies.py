"""Every request over stdio gets a reply, and the server keeps serving (issue 15).

Raw JSON-RPC lines to a real ``python -m retained`` subprocess: the lines an
SDK client would never send (lone surrogates, deep nesting, huge integers,
garbage), stdin closing right after a write, and signals.
"""

from __future__ import annotations

import json
import signal

import pytest

from .conftest import RECORD_BYTES_MAX_FOR_TESTS, check_chain_from_file, log_bytes

REPLY_S = 20.0  # bound on one reply from a server that is already up


def _call_line(request_id: int, tool: str, arguments_json: str) -> bytes:
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
        f'"params":{{"name":"{tool}","arguments":{arguments_json}}}}}\n'
    ).encode()


def _reply(server, request_id):
    line = server.out.until(lambda raw: json.loads(raw).get("id") == request_id, timeout=REPLY_S)
    return json.loads(line)


def _tool_error(reply) -> str:
    result = reply["result"]
    assert result["isError"] is True, reply
    text = result["content"][0]["text"]
    assert text.startswith("Error executing tool "), text
    return text.split(": ", 1)[1]


HOSTILE_CALLS = [
    # (tool, raw arguments, words the tool error must hold)
    ("memory_write", '{"text":"a\\ud800b"}', "argument 'text': holds a lone surrogate (U+D800)"),
    ("memory_write", '{"text":"a","fields":{"k\\udfff":1}}', "lone surrogate (U+DFFF)"),
    ("memory_search", '{"query":"dark \\ud800 mode"}', "argument 'query': holds a lone surrogate"),
    ("memory_write", '{"text":"a","fields":{"x":' + "[" * 200 + "]" * 200 + "}}", "argument 'fields': nested"),
    ("memory_write", '{"text":"a","fields":{"x":' + "9" * 5000 + "}}", "argument 'fields.x': number out of range"),
    ("memory_write", '{"text":"a","fields":{"x":1e400}}', "number out of range"),
    ("memory_get", '{"ids":[9223372036854775808]}', "invalid_argument"),
    ("memory_get", '{"around":9223372036854775808}', "invalid_argument"),
    ("memory_write", '{"text":"a","supersedes":[9223372036854775808]}', "invalid_argument"),
    ("memory_forget", '{"ids":[18446744073709551616],"reason":"r"}', "invalid_argument"),
    ("memory_write", '{"text":"   "}', "invalid_argument: field text: is empty"),
    ("memory_write", '{"text":""}', "invalid_argument"),
]


def test_issue_15_hostile_tool_calls_each_get_a_coded_tool_error_and_the_server_keeps_serving(raw_server, tmp_path):
    server = raw_server()
    server.initialize()
    assert not server.call("memory_write", {"text": "the first record"})["result"].get("isError")
    before = log_bytes(tmp_path / "store")
    for n, (tool, arguments, words) in enumerate(HOSTILE_CALLS, start=100):
        server.send_raw(_call_line(n, tool, arguments))
        message = _tool_error(_reply(server, n))
        assert message.startswith("invalid_argument: ") and words in message, (tool, arguments[:60], message)
        assert "internal_error" not in message and "OverflowError" not in message
    assert log_bytes(tmp_path / "store") == before, "a refused call wrote something"
    assert server.request("ping")["result"] == {}
    assert not server.call("memory_write", {"text": "still serving"})["result"].get("isError")
    assert server.close() == 0
    assert [r["text"] for r in check_chain_from_file(tmp_path / "store" / "log.jsonl")] == ["the first record", "still serving"]


def test_issue_15_lines_that_are_not_requests_get_json_rpc_errors(raw_server):
    server = raw_server()
    server.initialize()
    server.send_raw(b"this is not json\n")
    parse = json.loads(server.out.until(lambda raw: b"-32700" in raw, timeout=REPLY_S))
    assert parse["id"] is None and parse["error"]["code"] == -32700
    cases = [
        # (line, id the reply carries, JSON-RPC code)
        (b'{"jsonrpc":"2.0","id":7,"method":"prompts/get","params":{"name":"nope"}}', 7, -32602),
        (b'{"jsonrpc":"2.0","id":8,"method":"ping\\ud800"}', 8, -32600),
        (b'{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{"name":"brief","arguments":{"scope":"\\ud800"}}}', 9, -32602),
        (b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":"wrong"}', 10, -32602),
        (b'{"jsonrpc":"1.0","id":11,"method":"ping"}', 11, -32600),
    ]
    for line, request_id, code in cases:
        server.send_raw(line + b"\n")
        reply = _reply(server, request_id)
        assert reply["error"]["code"] == code, (line, reply)
    # An id the client could not match (thousands of digits) is answered with id null.
    server.send_raw(b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}\n')
    invalid = json.loads(server.out.until(lambda raw: b"-32600" in raw and b'"id":null' in raw, timeout=REPLY_S))
    assert invalid["error"]["code"] == -32600
    # A notification, even a broken one, gets no reply; the server keeps serving.
    server.send_raw(b'{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"\\ud800"}}\n')
    assert server.request("ping")["result"] == {}
    assert server.close() == 0


def test_issue_15_a_line_over_the_request_limit_is_refused_and_the_server_keeps_serving(raw_server):
    server = raw_server()
    server.initialize()
    huge = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"memory_write","arguments":{"text":"'
    server.send_raw(huge + b"x" * (RECORD_BYTES_MAX_FOR_TESTS + 2 * 1024 * 1024) + b'"}}}\n')
    reply = _reply(server, 5)  # answered with its own id, read from the line's first bytes (issue 29)
    assert reply["error"]["code"] == -32600 and "skipped" in reply["error"]["message"]
    assert server.request("ping")["result"] == {}
    assert server.close() == 0


def test_issue_15_requests_read_before_stdin_closes_are_answered(raw_server, tmp_path):
    server = raw_server()
    server.initialize()
    lines = b"".join(_call_line(i, "memory_write", json.dumps({"text": f"note {i}"})) for i in range(1, 21))
    server.send_raw(lines)
    server.proc.stdin.close()  # at once: the writes are read, not yet answered
    replies = [json.loads(raw) for raw in server.out.rest(timeout=REPLY_S * 3) if raw.strip()]
    assert server.proc.wait(timeout=REPLY_S) == 0
    answered = sorted(r["id"] for r in replies if r.get("id") in range(1, 21))
    assert answered == list(range(1, 21)), answered
    assert all(not r["result"].get("isError") for r in replies if r.get("id") in range(1, 21))
    assert len(check_chain_from_file(tmp_path / "store" / "log.jsonl")) == 20


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_issue_15_the_stdio_server_stops_on_a_signal(raw_server, signum):
    """It stops by itself, with the signal's code; REPLY_S only bounds a hang (how fast is not a test's to say)."""
    server = raw_server()
    server.initialize()
    assert server.request("ping")["result"] == {}
    server.proc.send_signal(signum)
    status = server.proc.wait(timeout=REPLY_S)
    assert status == 128 + signum


def test_issue_15_memory_search_answers_from_the_log_when_the_index_cannot_be_opened(raw_server, tmp_path):
    from retained import Store

    store_dir = tmp_path / "store"
    with Store(store_dir) as s:
        s.write("the deploy target is staging")
    (store_dir / "index.sqlite3").unlink(missing_ok=True)
    (store_dir / "index.sqlite3").mkdir()  # cannot be opened, whoever runs the test
    server = raw_server()
    server.initialize()
    reply = server.call("memory_search", {"query": "deploy"})
    result = reply["result"]
    assert not result.get("isError"), result["content"][0]["text"]
    found = result["structuredContent"]
    assert found["returned"] == 1 and "answered from the log" in found["mode_reason"]
    assert server.close() == 0


def test_issue_29_memory_get_answers_from_the_log_when_the_index_cannot_be_opened(raw_server, tmp_path):
    from retained import Store

    store_dir = tmp_path / "store"
    with Store(store_dir) as s:
        for text in ("first note", "second note", "third note"):
            s.write(text)
    (store_dir / "index.sqlite3").unlink(missing_ok=True)
    (store_dir / "index.sqlite3").mkdir()  # cannot be opened, whoever runs the test
    server = raw_server()
    server.initialize()
    for arguments, seqs in (({"ids": [3, 1]}, [3, 1]), ({"around": 2, "window": 1}, [1, 2, 3])):
        result = server.call("memory_get", arguments)["result"]
        assert not result.get("isError"), result["content"][0]["text"]
        assert [e["seq"] for e in result["structuredContent"]["records"]] == seqs
    assert server.close() == 0


# -- issue 29, point 9: every request gets its answer, of a bounded size -------------------------------------


def test_issue_29_an_id_of_any_other_json_type_gets_invalid_request_with_a_null_id(raw_server):
    server = raw_server()
    server.initialize()
    for bad in (b"1.5", b"2.0", b"true", b"false", b"null", b"[1]", b'{"a":1}'):
        server.send_raw(b'{"jsonrpc":"2.0","id":' + bad + b',"method":"ping"}\n')
        reply = json.loads(server.out.next(timeout=REPLY_S))
        assert reply == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": reply["error"]["message"]}}, bad
        assert "id must be a string or an integer" in reply["error"]["message"], bad
    assert server.request("ping")["result"] == {}
    assert server.close() == 0


def test_issue_29_invalid_utf8_on_stdio_is_refused_and_nothing_is_written(raw_server, tmp_path):
    server = raw_server()
    server.initialize()
    server.send_raw(_call_line(7, "memory_write", '{"text":"bad X byte"}').replace(b"X", b"\xff"))
    reply = _reply(server, 7)
    assert reply["error"]["code"] == -32700 and "not valid UTF-8" in reply["error"]["message"], reply
    assert not (tmp_path / "store" / "log.jsonl").exists()
    assert server.close() == 0


def test_issue_29_memory_get_replies_are_bounded_and_say_what_they_left_out(raw_server):
    server = raw_server()
    server.initialize()
    third = "y" * (RECORD_BYTES_MAX_FOR_TESTS // 3)
    for i in range(5):
        assert not server.call("memory_write", {"text": f"{i} {third}"})["result"].get("isError")
    reply = server.call("memory_get", {"ids": [1, 2, 3, 4, 5]})["result"]
    got = reply["structuredContent"]
    assert 1 <= got["returned"] < 5 and got["returned"] + got["more"] == 5
    kept = [e["seq"] for e in got["records"]]
    assert kept + got["left_out_for_size"]["seqs"] == [1, 2, 3, 4, 5]
    assert sum(e["length"] for e in got["records"]) <= RECORD_BYTES_MAX_FOR_TESTS
    assert "memory_get ids=" in reply["content"][0]["text"]
    assert server.close() == 0
