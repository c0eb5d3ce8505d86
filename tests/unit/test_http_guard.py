"""The HTTP access guard's reading of origins (issue 14): scheme, host and port, nothing looser."""

from __future__ import annotations

import pytest

from retained.http_guard import allowed_origins, origin_text, parse_origin


@pytest.mark.parametrize(("value", "expected"), [
    ("http://127.0.0.1:8765", ("http", "127.0.0.1", 8765)),
    ("HTTP://LocalHost:8765", ("http", "localhost", 8765)),
    ("http://127.0.0.1", ("http", "127.0.0.1", 80)),
    ("https://memory.example.org", ("https", "memory.example.org", 443)),
    ("https://memory.example.org/", ("https", "memory.example.org", 443)),
    ("http://[::1]:9000", ("http", "::1", 9000)),
    ("http://[::1]", ("http", "::1", 80)),
])
def test_an_origin_is_read_as_scheme_host_and_port(value, expected):
    assert parse_origin(value) == expected


@pytest.mark.parametrize("value", [
    "null", "", "127.0.0.1:8765", "file://", "ftp://127.0.0.1", "http://", "http://:80", "http://a:b",
    "http://a:0", "http://a:70000", "http://::1:80", "http://[::1", "http://[::1]x", "http://user@127.0.0.1",
    "http://127.0.0.1/path", "http://127.0.0.1:80?x", "javascript:alert(1)",
])
def test_what_is_not_an_origin_is_refused(value):
    assert parse_origin(value) is None


def test_a_server_accepts_its_own_names_on_its_own_port_and_what_the_user_allows():
    origins = allowed_origins({"127.0.0.1", "localhost"}, 8765, ["https://memory.example.org"])
    assert origins == {("http", "127.0.0.1", 8765), ("http", "localhost", 8765), ("https", "memory.example.org", 443)}
    assert ("http", "127.0.0.1", 9999) not in origins
    assert sorted(origin_text(o) for o in origins) == [
        "http://127.0.0.1:8765", "http://localhost:8765", "https://memory.example.org"]
    assert origin_text(("http", "::1", 80)) == "http://[::1]"
    with pytest.raises(ValueError, match=r"--allow-origin 'memory\.example\.org' is not an origin"):
        allowed_origins({"127.0.0.1"}, 8765, ["memory.example.org"])
