"""The embedding client against a real HTTP server on 127.0.0.1 (tests/embed_server.py)."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator

import pytest

from retained.errors import (
    EmbedBadResponse,
    EmbedCircuitOpen,
    EmbedConfigError,
    EmbedError,
    EmbedTimeout,
    EmbedUnavailable,
    RetainedError,
)
from retained.vectors.embed import Breaker, Embedder, protocol_for
from tests.embed_server import EmbedServer, hashed_vector

DIM = 16
KEY = "sk-test-0123456789abcdef-not-a-real-key"


class FakeClock:
    """A monotonic clock the test moves by hand, so no test sleeps through a cool-down."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=DIM) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(server: EmbedServer) -> Iterator[None]:
    server.reset()
    if server._httpd is None:
        server.start()
    yield
    server.reset()


def close(a: list[float], b: list[float]) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) for x, y in zip(a, b, strict=True))


def unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


# -- protocols -----------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["ollama", "ollama-legacy", "openai"])
def test_each_protocol_round_trips_vectors_in_order(server: EmbedServer, protocol: str) -> None:
    texts = ["the cat sat", "a dog barked", "", "the cat sat"]
    emb = Embedder(server.url(protocol), "test-model")
    assert emb.protocol == protocol
    got = emb.embed(texts)
    assert len(got) == len(texts)
    for text, vec in zip(texts, got, strict=True):
        assert len(vec) == DIM
        assert close(unit(vec), hashed_vector(text, DIM))
    assert got[0] == got[3]
    assert emb.dim == DIM
    assert all(r["payload"]["model"] == "test-model" for r in server.requests)


def test_legacy_endpoint_is_not_normalised_and_sends_one_prompt_per_request(server: EmbedServer) -> None:
    emb = Embedder(server.url("ollama-legacy"), "m")
    got = emb.embed(["one", "two", "three"])
    assert math.isclose(math.sqrt(sum(x * x for x in got[0])), server.legacy_scale)
    assert [r["payload"]["prompt"] for r in server.requests] == ["one", "two", "three"]


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_batching_protocols_send_batch_size_texts_per_request(server: EmbedServer, protocol: str) -> None:
    emb = Embedder(server.url(protocol), "m", batch_size=4)
    texts = [f"text number {i}" for i in range(10)]
    got = emb.embed(texts)
    assert [len(r["payload"]["input"]) for r in server.requests] == [4, 4, 2]
    assert close(unit(got[9]), hashed_vector("text number 9", DIM))


def test_openai_answers_are_sorted_by_index(server: EmbedServer) -> None:
    # The server lists data in reverse; the client must order by "index".
    got = Embedder(server.url("openai"), "m").embed(["alpha", "beta", "gamma"])
    assert close(got[0], hashed_vector("alpha", DIM))
    assert close(got[2], hashed_vector("gamma", DIM))


def test_prefixes_and_input_type_reach_the_server(server: EmbedServer) -> None:
    emb = Embedder(
        server.url("openai"), "m", query_prefix="query: ", passage_prefix="passage: ", send_input_type=True
    )
    emb.embed(["stored"])
    emb.embed_query("asked")
    first, second = (r["payload"] for r in server.requests)
    assert first["input"] == ["passage: stored"] and first["input_type"] == "passage"
    assert second["input"] == ["query: asked"] and second["input_type"] == "query"


def test_url_path_picks_the_protocol_and_a_proxy_prefix_is_kept() -> None:
    assert protocol_for("http://h:1/api/embed") == "ollama"
    assert protocol_for("http://h:1/api/embeddings/") == "ollama-legacy"
    assert protocol_for("https://h/proxy/v1/embeddings?api-version=1") == "openai"


@pytest.mark.parametrize("url", ["http://127.0.0.1:11434", "http://127.0.0.1:8000/v1", "ftp://h/api/embed", "nonsense"])
def test_url_without_a_known_path_is_refused_naming_the_three(url: str) -> None:
    with pytest.raises(EmbedConfigError) as info:
        Embedder(url, "m")
    assert info.value.code == "embed_config"
    assert "/api/embed" in str(info.value) or "http(s)" in str(info.value)


def test_empty_model_is_refused(server: EmbedServer) -> None:
    with pytest.raises(EmbedConfigError):
        Embedder(server.url(), " ")


# -- timeouts and unavailability -------------------------------------------------


def test_read_timeout_raises_a_timeout_error(server: EmbedServer) -> None:
    server.delay_s = 1.0
    emb = Embedder(server.url("ollama"), "m", read_timeout_s=0.05)
    with pytest.raises(EmbedTimeout) as info:
        emb.embed(["slow"])
    assert info.value.code == "embed_timeout"
    assert "read timeout" in str(info.value)


def test_connect_timeout_raises_a_timeout_error() -> None:
    # A listening socket whose accept queue is full: the kernel drops further SYNs,
    # so connect() waits until the client's connect timeout.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        emb = Embedder(f"http://127.0.0.1:{port}/api/embed", "m", connect_timeout_s=0.05, read_timeout_s=0.05)
        with pytest.raises(EmbedTimeout):
            emb.embed(["x"])
    finally:
        for s in fillers:
            s.close()
        listener.close()


def test_stopped_server_is_unavailable_and_back_after_start(server: EmbedServer) -> None:
    emb = Embedder(server.url(), "m")
    server.stop()
    with pytest.raises(EmbedUnavailable) as info:
        emb.embed(["x"])
    assert info.value.code == "embed_unavailable"
    assert "is it running" in str(info.value)
    server.start()
    assert len(emb.embed(["x"])[0]) == DIM


def test_http_500_is_unavailable_with_the_servers_reason(server: EmbedServer) -> None:
    server.fail_status = 500
    with pytest.raises(EmbedUnavailable) as info:
        Embedder(server.url(), "m").embed(["x"])
    assert "HTTP 500" in str(info.value) and "exploded" in str(info.value)


# -- breaker ---------------------------------------------------------------------


def test_breaker_opens_after_consecutive_failures_and_sends_nothing(server: EmbedServer) -> None:
    clock = FakeClock()
    emb = Embedder(server.url(), "m", breaker=Breaker(failures_max=3, cooldown_s=30, clock=clock))
    server.fail_status = 500
    for _ in range(3):
        with pytest.raises(EmbedUnavailable):
            emb.embed(["x"])
    assert emb.status()["breaker"]["state"] == "open"
    sent = len(server.requests)
    with pytest.raises(EmbedCircuitOpen) as info:
        emb.embed(["x"])
    assert len(server.requests) == sent
    assert info.value.code == "embed_circuit_open"
    assert "open until" in str(info.value) and "HTTP 500" in str(info.value)
    state = emb.status()["breaker"]
    assert state["failures"] == 3 and state["retry_in_s"] == 30 and state["open_until"].endswith("Z")


def test_breaker_half_opens_after_the_cooldown_and_closes_on_success(server: EmbedServer) -> None:
    clock = FakeClock()
    emb = Embedder(server.url(), "m", breaker=Breaker(failures_max=2, cooldown_s=30, clock=clock))
    server.fail_status = 500
    for _ in range(2):
        with pytest.raises(EmbedUnavailable):
            emb.embed(["x"])
    clock.t += 29.9
    with pytest.raises(EmbedCircuitOpen):
        emb.embed(["x"])
    clock.t += 0.2
    assert emb.breaker.state()["state"] == "half_open"
    server.fail_status = 0
    assert len(emb.embed(["x"])) == 1
    assert emb.breaker.state() == {
        "state": "closed", "failures": 0, "open_until": None, "retry_in_s": None, "last_error": emb.breaker.last_error
    }
    assert emb.breaker.describe() == "closed"


def test_failed_half_open_trial_reopens_for_a_whole_cooldown(server: EmbedServer) -> None:
    clock = FakeClock()
    emb = Embedder(server.url(), "m", breaker=Breaker(failures_max=2, cooldown_s=10, clock=clock))
    server.fail_status = 503
    for _ in range(2):
        with pytest.raises(EmbedUnavailable):
            emb.embed(["x"])
    clock.t += 10
    with pytest.raises(EmbedUnavailable):  # the trial is sent, and fails
        emb.embed(["x"])
    assert emb.breaker.state()["state"] == "open"
    assert emb.breaker.state()["retry_in_s"] == 10
    with pytest.raises(EmbedCircuitOpen):
        emb.embed(["x"])


def test_half_open_lets_exactly_one_trial_through() -> None:
    clock = FakeClock()
    breaker = Breaker(failures_max=1, cooldown_s=5, clock=clock)
    breaker.failure(EmbedUnavailable("down"))
    clock.t += 5
    assert breaker.allow() is True
    assert breaker.allow() is False
    assert "half-open" in breaker.describe()


def test_a_success_resets_the_failure_count(server: EmbedServer) -> None:
    emb = Embedder(server.url(), "m", breaker=Breaker(failures_max=2, clock=FakeClock()))
    server.fail_status = 500
    with pytest.raises(EmbedUnavailable):
        emb.embed(["x"])
    server.fail_status = 0
    emb.embed(["x"])
    server.fail_status = 500
    with pytest.raises(EmbedUnavailable):
        emb.embed(["x"])
    assert emb.breaker.state()["state"] == "closed"


def test_breaker_settings_are_checked() -> None:
    with pytest.raises(EmbedConfigError):
        Breaker(failures_max=0)
    with pytest.raises(EmbedConfigError):
        Breaker(cooldown_s=-1)


# -- bad answers -----------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["ollama", "ollama-legacy", "openai"])
def test_wrong_dimension_is_rejected_against_the_first_seen(server: EmbedServer, protocol: str) -> None:
    emb = Embedder(server.url(protocol), "m")
    emb.embed(["first"])
    server.wrong_dim = True
    with pytest.raises(EmbedBadResponse) as info:
        emb.embed(["second"])
    assert info.value.code == "embed_bad_response"
    assert f"{DIM - 1}-dimensional" in str(info.value) and f"expected {DIM}" in str(info.value)
    assert info.value.expected == DIM and info.value.observed == DIM - 1


def test_wrong_dimension_is_rejected_against_the_configured(server: EmbedServer) -> None:
    with pytest.raises(EmbedBadResponse) as info:
        Embedder(server.url(), "m", dim=384).embed(["x"])
    assert "expected 384" in str(info.value)


@pytest.mark.parametrize("protocol", ["ollama", "ollama-legacy", "openai"])
def test_non_numeric_value_is_rejected(server: EmbedServer, protocol: str) -> None:
    server.non_numeric = True
    with pytest.raises(EmbedBadResponse) as info:
        Embedder(server.url(protocol), "m").embed(["x"])
    assert "non-numeric value in vector 0 at position 0 (str)" in str(info.value)


def test_nan_is_rejected(server: EmbedServer) -> None:
    server.nan = True
    with pytest.raises(EmbedBadResponse) as info:
        Embedder(server.url("ollama"), "m").embed(["x", "y"])
    assert "non-finite value (nan) in vector 0" in str(info.value)


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_wrong_count_is_rejected(server: EmbedServer, protocol: str) -> None:
    server.wrong_count = True
    with pytest.raises(EmbedBadResponse) as info:
        Embedder(server.url(protocol), "m").embed(["a", "b", "c"])
    assert "2 vectors for 3 texts" in str(info.value)


def test_a_body_of_another_protocol_is_rejected_with_a_hint(server: EmbedServer) -> None:
    # An OpenAI-compatible answer read as if it were Ollama's (a proxy rewriting paths).
    emb = Embedder(server.url("openai"), "m")
    emb.protocol = "ollama"
    with pytest.raises(EmbedBadResponse) as info:
        emb.embed(["x"])
    assert "without 'embeddings'" in str(info.value) and "path" in str(info.value)


def test_bad_answers_count_as_breaker_failures(server: EmbedServer) -> None:
    emb = Embedder(server.url(), "m", breaker=Breaker(failures_max=2, clock=FakeClock()))
    server.non_numeric = True
    for _ in range(2):
        with pytest.raises(EmbedBadResponse):
            emb.embed(["x"])
    with pytest.raises(EmbedCircuitOpen):
        emb.embed(["x"])


# -- the key ---------------------------------------------------------------------


def test_key_is_sent_and_never_shown(server: EmbedServer) -> None:
    server.require_key = KEY
    emb = Embedder(server.url("openai"), "m", api_key=KEY)
    assert len(emb.embed(["x"])) == 1
    assert KEY not in repr(emb) and KEY not in str(emb.status())


def test_key_never_appears_in_errors_even_when_the_server_echoes_it(server: EmbedServer) -> None:
    server.require_key = "the-right-key"
    emb = Embedder(f"http://user:{KEY}@127.0.0.1:{server.port}/v1/embeddings?k={KEY}", "m", api_key=KEY)
    assert KEY not in repr(emb) and KEY not in emb.url
    with pytest.raises(EmbedUnavailable) as info:
        emb.embed(["x"])
    err = info.value
    assert "HTTP 401" in str(err) and "api key setting" in str(err)
    assert "<key>" in str(err)  # the server's echo, redacted
    texts = [str(err), repr(err), str(err.to_dict()), emb.breaker.describe(), str(emb.status())]
    assert not any(KEY in t for t in texts)
    server.require_key = None
    server.stop()
    with pytest.raises(EmbedError) as down:
        emb.embed(["x"])
    assert KEY not in str(down.value)


def test_every_embed_error_is_a_retained_error() -> None:
    for cls in (EmbedBadResponse, EmbedCircuitOpen, EmbedConfigError, EmbedTimeout, EmbedUnavailable):
        assert issubclass(cls, RetainedError)
        assert cls.code.startswith("embed_")
