"""Ranking by place and by rarity (issue 18, session level): a turn among other matching turns of
its conversation gains from them, and a question's rare word counts for more of the coverage than
its common ones. Real stores, real writes, real searches; each step also turned off to show that
the test measures it.
"""

from __future__ import annotations

import dataclasses

from retained import Store
from retained.index.search import RANKING, shares

# Turns that share no word with the questions below.
CHAT = [
    ("Gina", "Morning! How was the weekend?"),
    ("Jon", "Quiet, mostly gardening and a long walk."),
    ("Gina", "Sounds restful. I repainted the hallway."),
    ("Jon", "What colour did you pick?"),
    ("Gina", "A pale green, it brightens the whole entrance."),
    ("Jon", "Nice. My neighbour lent me a ladder for the gutters."),
    ("Gina", "Careful up there!"),
    ("Jon", "Always. Then we watched a film in the evening."),
    ("Gina", "Anything good?"),
    ("Jon", "An old western, slow but lovely."),
    ("Gina", "I should watch more of those."),
    ("Jon", "I can send you a list."),
]


def converse(store: Store, turns: list[tuple[str, str]]) -> list[int]:
    return [store.write(text, fields={"speaker": who})["seq"] for who, text in turns]


def ranked(store: Store, question: str, **ranking: float) -> list[int]:
    store.index.ranking = dataclasses.replace(RANKING, **ranking)
    store.hybrid.newer_first = False  # the session step alone (the newer-first step has its own tests)
    try:
        return [r["seq"] for r in store.search(question, k=10)["results"]]
    finally:
        store.index.ranking = RANKING


def test_a_turn_among_other_matching_turns_ranks_above_a_lone_match(tmp_path):
    """The fair is talked about at length in one place and mentioned in passing in another: the
    answer comes from the place where the talk is, though the passing mention has more of the words."""
    with Store(tmp_path / "s") as store:
        converse(store, CHAT)
        lone = converse(store, [("Gina", "The school fair had a cake stall, by the way.")])[0]
        converse(store, CHAT)
        place = converse(store, [
            ("Jon", "The school fair was packed on Saturday."),
            ("Gina", "I made a lemon cake for the stall."),
            ("Jon", "The fair raised money for the library."),
        ])
        converse(store, CHAT)
        question = "What cake was there at the school fair stall?"
        assert ranked(store, question, session_credit=0.0)[0] == lone
        got = ranked(store, question)
        assert got[0] in place and got.index(place[1]) < got.index(lone), got


def test_notes_gain_nothing_from_the_notes_around_them(tmp_path):
    """The same texts written as notes (no speaker): the step never applies, the order is bm25 and coverage."""
    with Store(tmp_path / "s") as store:
        for _, text in CHAT:
            store.write(text)
        lone = store.write("The school fair had a cake stall, by the way.")["seq"]
        for _, text in CHAT:
            store.write(text)
        for text in ("The school fair was packed on Saturday.", "I made a lemon cake for the stall.",
                     "The fair raised money for the library."):
            store.write(text)
        question = "What cake was there at the school fair stall?"
        assert ranked(store, question)[0] == lone
        assert ranked(store, question) == ranked(store, question, session_credit=0.0)


def test_the_rare_word_of_a_question_counts_for_more_than_its_common_ones(tmp_path):
    """'deploy' and 'friday' are in many notes, 'rollback' in one: the note with the rare word
    comes first, though another note has both common words (and is shorter, which bm25 likes)."""
    with Store(tmp_path / "s") as store:
        for i in range(8):
            store.write(f"The deploy of service {i} went out as planned.")
            store.write(f"Friday retro number {i} was short.")
        for i in range(12):
            store.write(f"Unrelated note number {i} about lunch plans.")
        rare = store.write("The rollback script lives in the ops folder, next to the old runbooks and the paging notes.")
        common = store.write("Every deploy on Friday needs a second reviewer.")
        question = "Who ran the deploy rollback on Friday?"
        assert ranked(store, question, rarity=0.0)[:2] == [common["seq"], rare["seq"]]
        assert ranked(store, question)[:2] == [rare["seq"], common["seq"]]


def test_shares_follow_rarity_and_add_up_to_the_terms():
    got = shares([1, 10, 100], 1000, 1.0)
    assert got is not None and got[0] > got[1] > got[2]
    assert abs(sum(got) - 3) < 1e-9
    assert shares([5], 1000, 1.0) is None and shares([1, 10], 1000, 0.0) is None


def test_what_kind_of_searches_for_the_kind_not_the_word_kind(tmp_path):
    """'What kind of art ...': the frame words before 'of' are not searched, so 'thanks for your kind
    words' no longer outranks the turn about the art."""
    with Store(tmp_path / "s") as store:
        converse(store, CHAT)
        kind = converse(store, [("Caroline", "Thanks, your kind words mean a lot, I will make time for us.")])[0]
        converse(store, CHAT)
        art = converse(store, [("Caroline", "Abstract art is what I love, big canvases full of colour.")])[0]
        assert ranked(store, "What kind of art does Caroline make?")[0] == art
        assert ranked(store, "What type of art does Caroline like?")[0] == art
        assert ranked(store, "Was Caroline kind to her friends?")[0] == kind
