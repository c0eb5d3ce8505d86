"""What a client that reads only the text content of a tool reply sees (issue 18, points 2, 8, 9).

A real `python -m retained` over stdio, spoken to in JSON-RPC; the assertions read
``content[0].text`` only, never the structured result.
"""

from __future__ import annotations

FACT = "The deploy key for the billing cluster rotates on the first Monday of each month."


def _text(reply: dict) -> str:
    assert "error" not in reply and not reply["result"].get("isError"), reply
    (content,) = reply["result"]["content"]
    return content["text"]


def _padding(words: int, seed: str) -> str:
    return " ".join(f"{seed}{i % 97}" for i in range(words))


def test_the_text_content_holds_the_matched_fact_of_a_2000_character_record(raw_server):
    server = raw_server()
    server.initialize()
    text = _padding(125, "alpha") + " " + FACT + " " + _padding(125, "omega")
    assert len(text) >= 2000
    _text(server.call("memory_write", {"text": text}))
    shown = _text(server.call("memory_search", {"query": "when does the billing deploy key rotate?"}))
    assert FACT in shown
    assert "cut:" not in shown
    got = _text(server.call("memory_get", {"ids": [1]}))
    assert FACT in got and text in got


def test_a_record_over_the_budget_is_cut_around_the_match_and_says_how_to_get_the_rest(raw_server):
    server = raw_server()
    server.initialize()
    text = _padding(3500, "alpha") + " " + FACT + " " + _padding(3500, "omega")  # ~52 KB, the default limit is 64 KiB
    seq = server.call("memory_write", {"text": text})["result"]["structuredContent"]["seq"]
    shown = _text(server.call("memory_search", {"query": "billing deploy key rotate"}))
    assert FACT in shown
    assert len(shown) < 0.7 * len(text)
    assert f"memory_get with ids=[{seq}]" in shown and "cut: characters" in shown
    budget = _text(server.call("memory_search", {"query": "billing deploy key rotate", "max_tokens": 40000}))
    assert "cut:" not in budget and budget.count("alpha") == 3500


def test_search_context_shows_the_question_a_reply_answers(raw_server):
    server = raw_server()
    server.initialize()
    for who, said in (("Caroline", "How is the new job going?"), ("Mel", "Do you play any instruments?"),
                      ("Caroline", "Yes, the clarinet, since school."), ("Mel", "That sounds lovely.")):
        _text(server.call("memory_write", {"text": said, "fields": {"speaker": who}}))
    shown = _text(server.call("memory_search", {"query": "clarinet", "context": 1}))
    lines = shown.splitlines()
    # The hit (its header, then its text), then its context record, each line marked "| ".
    hit = next(i for i, line in enumerate(lines) if "Yes, the clarinet" in line)
    assert lines[hit - 1].startswith("#3 ")
    context = [line for line in lines[hit + 1 :] if line.lstrip().startswith("| ")]
    assert any("Do you play any instruments?" in line for line in context), shown
    assert "context: 1 record(s)" in shown


def test_the_next_read_names_the_record_a_write_may_correct(raw_server):
    """The related step runs at the session's next read, not on the write (issue 31): the read names it."""
    server = raw_server()
    server.initialize()
    old = server.call("memory_write", {"text": "The API timeout is 30 seconds."})["result"]["structuredContent"]
    reply = server.call("memory_write", {"text": "We raised the API timeout to 60 seconds."})
    new = reply["result"]["structuredContent"]
    assert "related" not in new and "supersedes=[" not in _text(reply)
    server.call("memory_write", {"text": "Lunch is at noon."})
    read = server.call("memory_search", {"query": "lunch"})
    assert f"supersedes=[{old['seq']}, {new['seq']}]" in _text(read)
    told = read["result"]["structuredContent"]["related_to_writes"]
    assert told["checked"] == 3 and told["not_checked"] == 0
    assert [(w["seq"], [r["seq"] for r in w["related"]]) for w in told["writes"]] == [(new["seq"], [old["seq"]])]
    # Said once: the next read has nothing left to say.
    again = server.call("memory_get", {"ids": [old["seq"]]})
    assert "related_to_writes" not in again["result"]["structuredContent"] and "supersedes=[" not in _text(again)
