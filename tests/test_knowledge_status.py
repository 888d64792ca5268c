"""Honest status (knowledge_app.status): GET /knowledge and /health say from the start — with no
document yet — whether embeddings can be made; `"search": "hybrid"` only while they can."""

from __future__ import annotations

import socket

import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("knowledge_state")]


def dead_url() -> str:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_an_unreachable_embedding_server_is_said_before_any_document(owner_client, settings):
    settings.OLLAMA_HOST = dead_url()
    listed = owner_client.get("/knowledge").json()
    assert listed["documents"] == [] and listed["search"] == "words"
    embedding = listed["embedding"]
    assert embedding["status"] == "unreachable" and embedding["model"] == "nomic-embed-text"
    assert embedding["server"] == f"{settings.OLLAMA_HOST}/api/embed" and "cannot reach" in embedding["detail"]
    assert "OLLAMA_HOST" in embedding["hint"] and "no embedding model reachable" in listed["notice"]
    health = owner_client.get("/health").json()
    assert health["status"] == "degraded" and "no embedding model reachable" in health["embeddings"]


def test_a_missing_model_is_said_with_what_to_pull(owner_client, embed):
    embed.embed_models = []  # nothing pulled
    listed = owner_client.get("/knowledge").json()
    assert listed["search"] == "words" and listed["embedding"]["status"] == "missing"
    assert "ollama pull nomic-embed-text" in listed["embedding"]["hint"]
    assert "ollama pull nomic-embed-text" in owner_client.get("/health").json()["embeddings"]


def test_a_working_server_is_hybrid_and_health_has_no_complaint(owner_client, embed):
    listed = owner_client.get("/knowledge").json()
    assert listed["search"] == "hybrid" and listed["notice"] == ""
    assert listed["embedding"] == {"status": "ok", "model": "nomic-embed-text", "server": f"{embed.url}/api/embed",
                                   "detail": "", "hint": ""}
    assert "embeddings" not in owner_client.get("/health").json()


def test_an_openai_compatible_server_that_is_down_names_its_setting(owner_client, settings):
    settings.EMBEDDING_BASE_URL = dead_url() + "/v1"
    embedding = owner_client.get("/knowledge").json()["embedding"]
    assert embedding["status"] == "unreachable" and embedding["server"] == f"{settings.EMBEDDING_BASE_URL}/embeddings"
    assert "EMBEDDING_BASE_URL" in embedding["hint"]


def test_anonymous_callers_see_neither_the_list_nor_the_reasons(anon_client, settings):
    settings.OLLAMA_HOST = dead_url()
    assert anon_client.get("/knowledge").status_code in (302, 401, 403)
    assert set(anon_client.get("/health").json()) == {"status"}
