"""Conversation turns for the write benchmarks: LoCoMo's, or a generated corpus of the same shape.

Each turn is one ``"Speaker: text"`` string, as an agent that keeps a
conversation writes it. ``locomo_turns(n)`` reads ``memories.jsonl`` from
``../shared/data/locomo`` beside the repository (`DEFAULT_DATA`) and goes
round it as often as ``n`` needs, each round renaming the speakers (so names
keep their real frequency as a store grows); without that file it makes
turns of the same shape from a fixed vocabulary (`generated_turns`), so the
benchmarks run anywhere. ``source`` in each bench's JSON says which was used.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"

_SPEAKERS = ("Caroline", "Melanie", "Jon", "Gina", "John", "Maria", "Joanna", "Nate", "Tim", "Audrey")
_OPENERS = ("Hey", "Wow", "Thanks", "Oh", "Yeah", "Haha", "Sounds great", "That's awesome", "I see", "Totally")
_WORDS = (
    "I went to a support group yesterday and it was so powerful the kids painted a sunset at the lake last "
    "weekend my new job at the bakery starts next month we adopted a puppy named Oscar he loves the beach I've "
    "been reading a book about mindfulness and pottery classes help me relax our family camping trip was "
    "amazing despite the rain I'm thinking about going back to school for counseling the concert downtown was "
    "loud but fun she made a bowl in her pottery class and the community center hosts a charity run"
).split()


def generated_turns(n: int, seed: int = 7) -> list[str]:
    """``n`` turns of LoCoMo's shape (a speaker, 6-30 words, sometimes a question) from a fixed vocabulary."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        speaker = _SPEAKERS[(i // 2) % 2 + 2 * ((i // 400) % (len(_SPEAKERS) // 2))]
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 30)))
        end = "?" if rng.random() < 0.25 else "!" if rng.random() < 0.3 else "."
        out.append(f"{speaker}: {rng.choice(_OPENERS)}, {words}{end}")
    return out


def locomo_turns(n: int, data: Path = DEFAULT_DATA) -> tuple[list[str], str]:
    """``(turns, source)``: ``n`` ``"Speaker: text"`` turns, and where they came from."""
    path = data / "memories.jsonl"
    if not path.is_file():
        return generated_turns(n), "generated (no LoCoMo at " + str(data) + ")"
    with open(path, encoding="utf-8") as f:
        turns = [json.loads(line) for line in f]
    speakers = sorted({t["speaker"] for t in turns})
    out = []
    for i in range(n):
        t = turns[i % len(turns)]
        replica = i // len(turns)
        text, speaker = t["text"], t["speaker"]
        if replica:
            for s in speakers:
                text = text.replace(s, f"{s}{replica}")
            speaker = f"{speaker}{replica}"
        out.append(f"{speaker}: {text}")
    return out, f"locomo ({path})"


KINDS = ("turns", "prose", "urls", "code", "sentence")
SENTENCE = "the deploy target for proj-a moved from staging to production after the 0.3 release; " * 2


def texts_of_kind(kind: str, n: int) -> tuple[list[str], str]:
    """``(texts, source)``: ``n`` texts of one shape, for the write benchmarks (``--texts``).

    ``turns``: conversation turns (`locomo_turns`); ``prose``: their text
    without the speaker; ``urls``: the text with a link after it; ``code``:
    a short function with keyword arguments and a comment from the text;
    ``sentence``: the old benchmark's one sentence, numbered.
    """
    if kind == "sentence":
        return [f"{SENTENCE} #{i}" for i in range(n)], "sentence (one sentence, numbered)"
    turns, source = locomo_turns(n)
    said = [t.split(": ", 1)[-1] for t in turns]
    if kind == "turns":
        return turns, source
    if kind == "prose":
        return said, f"prose: the text of {source}"
    if kind == "urls":
        return ([f"{s} see https://example.com/docs/page-{i}?ref=notes#part-{i % 7}" for i, s in enumerate(said)],
                f"urls: the text of {source} and a link")
    if kind == "code":
        return ([f"def handle_{i}(request, retries={i % 5}):\n    return client.get(url, timeout=30)  # {s[:60]}"
                 for i, s in enumerate(said)], f"code: a function and a comment from {source}")
    raise ValueError(f"texts: {kind!r} is not one of {', '.join(KINDS)}")
