"""Vector math: normalise, float32 blobs, top-N scores, reciprocal rank fusion."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from retained.errors import InvalidRecord
from retained.vectors import numeric as vectors

ROOT = Path(__file__).resolve().parents[2]


def test_normalise_gives_unit_length_and_keeps_a_zero_vector() -> None:
    v = vectors.normalise([3, 4])
    assert v == [0.6, 0.8]
    assert vectors.normalise([0.0, 0.0]) == [0.0, 0.0]
    with pytest.raises(InvalidRecord):
        vectors.normalise([1.0, float("inf")])


def test_pack_is_little_endian_float32_of_the_normalised_vector() -> None:
    blob = vectors.pack([0.0, 2.0, 0.0])
    assert blob == b"\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x00"
    assert vectors.unpack(blob) == [0.0, 1.0, 0.0]
    with pytest.raises(InvalidRecord):
        vectors.unpack(b"\x00\x00\x00")


def test_matrix_stacks_blobs_and_top_scores_ranks_by_cosine() -> None:
    np = vectors.require_numpy()
    mat = vectors.matrix([vectors.pack([1, 0, 0]), vectors.pack([0, 1, 0]), vectors.pack([1, 1, 0])], 3)
    assert mat.shape == (3, 3)
    scores = mat @ np.asarray(vectors.normalise([1.0, 0.1, 0.0]), dtype=np.float32)
    got = vectors.top_scores(scores, 2)
    assert [row for row, _ in got] == [0, 2]
    assert math.isclose(got[0][1], 1 / math.sqrt(1.01), rel_tol=1e-6)
    assert [row for row, _ in vectors.top_scores(scores, 10)] == [0, 2, 1]
    assert vectors.top_scores(scores, 0) == []
    with pytest.raises(InvalidRecord):
        vectors.matrix([b"\x00" * 8], 3)
    assert vectors.matrix([], 4).shape == (0, 4)


def test_top_scores_breaks_ties_by_row_and_never_returns_minus_infinity() -> None:
    np = vectors.require_numpy()
    assert [row for row, _ in vectors.top_scores(np.ones(5, dtype=np.float32), 3)] == [0, 1, 2]
    assert vectors.top_scores(np.array([-np.inf, 0.5, -np.inf, 0.5]), 4) == [(1, 0.5), (3, 0.5)]


def test_rrf_sums_weighted_reciprocal_ranks() -> None:
    fused = vectors.rrf([["a", "b", "c"], ["c", "a"]], weights=[1.0, 0.5], k=60)
    scores = dict(fused)
    assert math.isclose(scores["a"], 1 / 61 + 0.5 / 62)
    assert math.isclose(scores["c"], 1 / 63 + 0.5 / 61)
    assert [i for i, _ in fused] == ["a", "c", "b"]


def test_rrf_is_deterministic_on_ties_and_ignores_repeats() -> None:
    assert [i for i, _ in vectors.rrf([["x", "y"], ["y", "x"]])] == ["x", "y"]
    assert dict(vectors.rrf([["x", "x"]]))["x"] == 1 / 61
    assert vectors.rrf([]) == []


def test_rrf_checks_its_arguments() -> None:
    with pytest.raises(InvalidRecord):
        vectors.rrf([["a"]], weights=[1.0, 2.0])
    with pytest.raises(InvalidRecord):
        vectors.rrf([["a"]], k=-1)


def test_without_numpy_a_reason_is_returned_and_fusion_still_works() -> None:
    """A child process where numpy cannot be imported (a None entry in sys.modules blocks it)."""
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "from retained.vectors import numeric as vectors\n"
        "from retained.errors import VectorsUnavailable\n"
        "r = vectors.numpy_missing(); assert r and 'retained[vectors]' in r, r\n"
        "assert vectors.numpy_missing() is r\n"
        "assert vectors.unpack(vectors.pack([1, 1])) == [0.7071067690849304, 0.7071067690849304]\n"
        "assert vectors.rrf([['a']])[0][0] == 'a'\n"
        "try:\n"
        "    vectors.matrix([], 2)\n"
        "except VectorsUnavailable as e:\n"
        "    assert e.code == 'vectors_unavailable'; print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_importing_vectors_does_not_import_numpy() -> None:
    code = "import sys; import retained.vectors.numeric; print('numpy' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "False", out.stderr


def test_rrf_keep_first_holds_the_head_of_the_first_ranking() -> None:
    lexical, dense = ["a", "b", "c", "d"], ["d", "c", "b"]
    plain = [i for i, _ in vectors.rrf([lexical, dense], [1.0, 1.0])]
    assert plain == ["d", "b", "c", "a"]  # the second ranking reorders the head
    kept = vectors.rrf([lexical, dense], [1.0, 1.0], keep_first=2)
    assert [i for i, _ in kept] == ["a", "b", "d", "c"]
    assert dict(kept) == dict(vectors.rrf([lexical, dense], [1.0, 1.0]))  # scores are the fused ones
    assert [i for i, _ in vectors.rrf([["a", "a", "b"], ["b"]], keep_first=5)] == ["a", "b"]
    assert vectors.rrf([[], ["x"]], keep_first=1) == [("x", 1 / 61)]
    with pytest.raises(InvalidRecord):
        vectors.rrf([["a"]], keep_first=-1)
