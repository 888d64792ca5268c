"""The optional reranker (knowledge_app.rerank): when RERANK_BASE_URL is set, search's best
candidates are re-ordered by the server's relevance scores; when it fails, is slow or answers
something that does not fit, the fused order stands, the status says why, and search never fails.
The server is tests/rerank_server.py, speaking llama.cpp's / vLLM's `/v1/rerank` and TEI's `/rerank`."""

from __future__ import annotations

import logging
import threading

import pytest
from django.test import Client

from knowledge_app import rerank
from tests.rerank_server import RerankServer
from tests.test_knowledge import indexed, results

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("knowledge_state")]
DOCS = {
    "boiler.txt": "The boiler manual says: bleed the radiators in autumn. The boiler pressure should read 1.5 bar.",
    "garden.txt": "The garden hose is in the shed. Water the tomatoes daily; the boiler is not in the garden.",
    "car.txt": "The car's tyre pressure is 2.2 bar at the front; the boiler service is booked for May.",
}
QUERY = "boiler pressure"


@pytest.fixture
def reranker(settings):
    server = RerankServer().start()
    rerank.forget()
    yield server
    server.stop()
    rerank.forget()


def use(settings, server: RerankServer, model: str = "bge-reranker-v2-m3") -> None:
    settings.RERANK_BASE_URL, settings.RERANK_MODEL = server.url, model
    rerank.forget()


@pytest.fixture
def library(owner_client, embed):
    for name, text in DOCS.items():
        assert indexed(owner_client, name, text)["status"] == "ready"
    return owner_client


def names(client: Client, query: str = QUERY, k: int = 3) -> list[str]:
    return [hit["name"] for hit in results(client, query, k)]


def test_the_reranker_reorders_the_fused_candidates(library, reranker, settings):
    fused = names(library)
    assert fused[0] == "boiler.txt" and len(fused) == 3
    reranker.scores = {"tyre pressure": 0.97, "bleed the radiators": 0.40}  # the scripted model's view
    use(settings, reranker)
    hits = results(library, QUERY, 3)
    assert [h["name"] for h in hits] == ["car.txt", "boiler.txt", "garden.txt"]
    assert hits[0]["score"] == pytest.approx(0.97) and hits[1]["score"] == pytest.approx(0.40)
    request = reranker.seen()[-1]
    assert request["path"] == "/v1/rerank" and request["body"]["model"] == "bge-reranker-v2-m3"
    assert request["body"]["query"] == QUERY and request["body"]["top_n"] == len(request["body"]["documents"])
    assert sorted(request["body"]["documents"]) == sorted(DOCS.values())
    assert library.get("/knowledge").json()["rerank"] == {"status": "ok", "model": "bge-reranker-v2-m3",
                                                          "server": reranker.url, "detail": ""}


def test_the_key_is_sent_and_a_base_url_with_v1_works(library, reranker, settings):
    fused = names(library)
    reranker.api_key, reranker.scores = "s3cret", {"tyre": 0.9}
    use(settings, reranker)
    settings.RERANK_BASE_URL, settings.RERANK_API_KEY = reranker.url + "/v1/", "s3cret"
    assert names(library)[0] == "car.txt"
    assert reranker.seen()[-1]["auth"] == "Bearer s3cret" and reranker.seen()[-1]["path"] == "/v1/rerank"
    settings.RERANK_API_KEY = "wrong"
    rerank.forget()
    assert names(library) == fused
    assert "RERANK_API_KEY" in library.get("/knowledge").json()["rerank"]["detail"]


def test_tei_is_asked_on_its_own_route_when_v1_rerank_is_not_there(library, reranker, settings):
    reranker.tei_only, reranker.scores = True, {"garden hose": 0.8}
    use(settings, reranker)
    assert names(library)[0] == "garden.txt"
    assert [r["path"] for r in reranker.seen()] == ["/v1/rerank", "/rerank"]
    assert "texts" in reranker.seen()[-1]["body"]
    assert names(library)[0] == "garden.txt"
    assert reranker.seen()[-1]["path"] == "/rerank"  # remembered: no second try of /v1/rerank


@pytest.mark.parametrize("answer, why", [
    ((500, {"error": "CUDA out of memory"}), "HTTP 500"),
    ((200, b"<html>proxy error</html>"), "not JSON"),
    ((200, {"data": []}), "no results"),
    ((200, {"results": [{"index": 7, "relevance_score": 0.9}]}), "fits none"),  # index out of range
    ((200, {"results": [{"index": 0, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.8}]}), "fits none"),
    ((200, {"results": [{"index": -1, "relevance_score": 0.9}]}), "fits none"),
    ((200, {"results": [{"index": "0", "relevance_score": 0.9}]}), "fits none"),
    ((200, {"results": [{"index": 0, "relevance_score": "high"}]}), "fits none"),
    ((200, b'{"results": [{"index": 0, "relevance_score": NaN}]}'), "fits none"),
])
def test_a_broken_answer_keeps_the_fused_order_and_the_status_says_why(library, reranker, settings, answer, why):
    fused = names(library)
    reranker.answer = answer
    use(settings, reranker)
    assert names(library) == fused  # search answers, in its own order
    state = library.get("/knowledge").json()["rerank"]
    assert state["status"] == "error" and why in state["detail"]
    health = library.get("/health").json()
    assert health["status"] == "degraded" and "reranker is not used" in health["rerank"]


def test_a_short_answer_puts_the_scored_first_and_keeps_the_rest_in_order(library, reranker, settings):
    fused = names(library)  # three passages: all three are sent, in this order
    reranker.answer = (200, {"results": [{"index": 2, "relevance_score": 0.5}]})
    use(settings, reranker)
    assert names(library) == [fused[2], fused[0], fused[1]]
    assert library.get("/knowledge").json()["rerank"]["status"] == "ok"


def test_a_slow_reranker_times_out_and_is_not_asked_again_at_once(library, reranker, settings, caplog):
    fused = names(library)
    reranker.gate = threading.Event()  # holds every answer until the test ends
    use(settings, reranker)
    settings.RERANK_TIMEOUT_S = 0.3
    with caplog.at_level(logging.WARNING, logger="knowledge_app.rerank"):
        assert names(library) == fused
        assert names(library) == fused
    assert len(reranker.seen()) == 1  # skipped for RETRY_AFTER_S after the failure
    assert [r.getMessage() for r in caplog.records if "reranker not used" in r.getMessage()] == [
        f"reranker not used, search keeps the fused order: {reranker.url}/v1/rerank did not answer within RERANK_TIMEOUT_S (0.3 s)"]
    assert "RERANK_TIMEOUT_S" in library.get("/knowledge").json()["rerank"]["detail"]


def test_a_failure_is_logged_once_however_often_it_repeats(library, reranker, settings, caplog, monkeypatch):
    reranker.answer = (503, {"error": "loading model"})
    use(settings, reranker)
    monkeypatch.setattr(rerank, "RETRY_AFTER_S", 0.0)  # asked every time
    with caplog.at_level(logging.WARNING, logger="knowledge_app.rerank"):
        for _ in range(3):
            names(library)
    assert len(reranker.seen()) == 3
    assert len([r for r in caplog.records if "reranker not used" in r.getMessage()]) == 1


def test_an_unreachable_reranker_keeps_search_working(library, reranker, settings):
    fused = names(library)
    use(settings, reranker)
    reranker.stop()
    assert names(library) == fused
    assert "cannot reach" in library.get("/knowledge").json()["rerank"]["detail"]


def test_only_the_callers_passages_are_sent(library, reranker, settings, other_user):
    mallory = Client()
    mallory.force_login(other_user)
    secret = "Mallory's boiler pressure log: the boiler pressure is 3 bar, the code is 9931."
    assert indexed(mallory, "mallory.txt", secret)["status"] == "ready"
    reranker.scores = {"9931": 1.0}
    use(settings, reranker)
    assert "mallory.txt" not in names(library)
    sent = [d for r in reranker.seen() for d in r["body"]["documents"]]
    assert sent and not any("9931" in d for d in sent)
    assert sorted(sent) == sorted(DOCS.values())
    assert names(mallory)[0] == "mallory.txt"  # her own search reranks only hers
    assert reranker.seen()[-1]["body"]["documents"] == [secret]


def test_without_a_reranker_nothing_is_asked_and_the_status_has_no_entry(library, reranker, settings):
    settings.RERANK_BASE_URL = ""
    names(library)
    assert reranker.seen() == []
    assert "rerank" not in library.get("/knowledge").json() and "rerank" not in library.get("/health").json()


def test_anonymous_health_shows_only_the_status(library, reranker, settings, anon_client):
    reranker.answer = (500, {"error": "boom"})
    use(settings, reranker)
    assert library.get("/health").json()["status"] == "degraded"
    assert anon_client.get("/health").json() == {"status": "degraded"}


def test_only_rerank_candidates_are_sent_and_the_rest_follow(library, reranker, settings):
    fused = names(library)
    reranker.scores = {"tyre": 0.9, "garden hose": 0.5}
    score = {"car.txt": 0.9, "garden.txt": 0.5}
    use(settings, reranker)
    settings.RERANK_CANDIDATES = 2  # the first two fused passages only
    assert names(library) == [*sorted(fused[:2], key=lambda n: -score.get(n, 0.01)), fused[2]]
    assert len(reranker.seen()[-1]["body"]["documents"]) == 2
