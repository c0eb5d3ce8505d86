"""Broken: stores honestly, but a request its JSON reader refuses (a lone surrogate, deep nesting, a huge
integer, a line that is not JSON) gets no reply at all, and stdin closing drops the requests in flight."""

from __future__ import annotations

from fake_retained import FakeStore, main

if __name__ == "__main__":
    main(FakeStore, answer_every_line=False)
