"""bench/_rerank.py, the bench's `/v1/rerank` server, without its model: a stand-in scorer, so what
is checked is the protocol (llama-server's / vLLM's shape, its 400s) and that Navi's client reads it."""

from __future__ import annotations

import httpx
import pytest

from bench._rerank import serve
from knowledge_app import rerank


class WordCount:
    """Scores a document by how many of the query's words it holds."""

    def score(self, query: str, documents: list[str]) -> list[float]:
        words = set(query.lower().split())
        return [float(len(words & set(d.lower().split()))) for d in documents]

    def tokens(self, query: str, documents: list[str]) -> int:
        return len(query.split()) + sum(len(d.split()) for d in documents)


@pytest.fixture
def url():
    server = serve(WordCount())
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_it_answers_best_first_cut_at_top_n(url):
    body = {"model": "m", "query": "boiler pressure", "top_n": 2,
            "documents": ["garden hose", "boiler pressure 1.5 bar", {"text": "the boiler"}]}
    answer = httpx.post(f"{url}/v1/rerank", json=body).json()
    assert [r["index"] for r in answer["results"]] == [1, 2]
    assert [r["relevance_score"] for r in answer["results"]] == [2.0, 1.0]
    assert answer["object"] == "list" and answer["usage"]["total_tokens"] == 10 and "document" not in answer["results"][0]
    with_text = httpx.post(f"{url}/rerank", json=body | {"return_documents": True}).json()
    assert with_text["results"][0]["document"] == {"text": "boiler pressure 1.5 bar"}


@pytest.mark.parametrize("body, message", [
    ([], "JSON object"),
    ({"documents": ["a"]}, '"query"'),
    ({"query": " ", "documents": ["a"]}, '"query"'),
    ({"query": "q", "documents": []}, '"documents"'),
    ({"query": "q", "documents": ["a", 3]}, "string or"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, '"top_n"'),
    ({"query": "q", "documents": ["a"], "top_n": True}, '"top_n"'),
    ({"query": "q", "documents": ["a"], "return_documents": "yes"}, '"return_documents"'),
])
def test_it_rejects_a_request_that_does_not_fit(url, body, message):
    response = httpx.post(f"{url}/v1/rerank", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def test_it_rejects_a_body_that_is_not_json_and_an_unknown_route(url):
    assert httpx.post(f"{url}/v1/rerank", content=b"{", headers={"Content-Type": "application/json"}).status_code == 400
    assert httpx.post(f"{url}/v1/embeddings", json={}).status_code == 404


def test_navis_client_reads_its_answers(url, settings):
    settings.RERANK_BASE_URL, settings.RERANK_MODEL = url, "bench"
    rerank.forget()
    try:
        assert rerank.order("boiler pressure", ["garden", "boiler", "boiler pressure"]) == [
            (2, 2.0), (1, 1.0), (0, 0.0)]
        assert rerank.state().status == "ok"
    finally:
        rerank.forget()
