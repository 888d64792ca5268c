"""The models the profiles' servers have (`GET /models`), a chat's own model checked against
them (`PATCH /sessions/<id> {"model"}`), and pulling one into Ollama from the page (staff)."""

from __future__ import annotations

import json
import re
from typing import AsyncIterator

import httpx
from asgiref.sync import async_to_sync
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse

from agent.llm import LLMError, choice
from agent.llm.ollama_backend import OllamaBackend
from agent.llm.openai_backend import OpenAIBackend
from agent.models import Profile
from agent.registry import get_agent
from navi_project import connections
from navi_project.http import ApiError, json_view, parse_json_body
from sessions_app import transfer
from sessions_app.auth import api_login_required

# What Ollama accepts as a model reference: [namespace/]name[:tag], maybe with a registry host.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:]{0,199}$")


async def models_of(backend_name: str) -> list[dict]:
    """`{"backend", "name", "size"?, "embedding"?}` per model the backend's server has now."""
    backend = get_agent().backends.get(backend_name)
    return [{"backend": backend_name, **m} for m in await choice.server_models(backend, fresh=True)]


def names_for_profile(profile: Profile) -> list[dict]:
    """The model lister sessions_app checks a chat's model with (400 when the server is away)."""
    try:
        return async_to_sync(models_of)(profile.effective_backend())
    except LLMError as exc:
        raise ApiError(f"cannot check the model: {exc}; try again once the server answers", 400) from None


async def _listing(backends: list[str]) -> tuple[list[dict], dict[str, str]]:
    found, errors = [], {}
    for name in backends:
        try:
            found += await models_of(name)
        except (LLMError, KeyError) as exc:
            errors[name] = str(exc)
    return found, errors


def listed_backends() -> list[str]:
    """The profiles' servers and the owner's connections (Settings): what the pickers list."""
    named = {p.effective_backend() for p in Profile.objects.all()}
    return sorted(named | {"ollama"} | {s.name for s in connections.servers()})


@api_login_required
@json_view("GET")
def models(request: HttpRequest) -> JsonResponse:
    """What the servers have now; `default` is the model a new chat of yours asks for and, when
    that is not on its server, `stand_in` the one it uses instead (agent.llm.choice)."""
    backends = listed_backends()
    found, errors = async_to_sync(_listing)(backends)
    default = transfer.default_profile(request.user)
    backend, wanted = default.effective_backend(), default.resolved_model()
    body = {"models": found, "default": wanted, "default_backend": backend,
            "owner_default": connections.default_choice()[1],
            "can_pull": request.user.is_staff and "ollama" in backends}
    if backend not in errors and not default.model:
        on_server = [m for m in found if m["backend"] == backend]
        if not any(choice.same_model(m["name"], wanted) for m in on_server):
            chatty = sorted(choice.chat_models(on_server), key=lambda m: m["name"])
            body["default_missing"] = True
            body["stand_in"] = chatty[0]["name"] if chatty else ""
    if errors:
        body["errors"] = errors
    return JsonResponse(body)


@api_login_required
@json_view("POST")
def model_pull(request: HttpRequest) -> StreamingHttpResponse:
    """Pull a model into Ollama; the answer streams Ollama's progress lines as NDJSON (staff only:
    a pull fills the server's disk for every user)."""
    if not request.user.is_staff:
        raise ApiError("only the owner (a staff account) can pull models onto the server; ask them to", 403)
    data = parse_json_body(request, allow_empty=False)
    name = data.get("name")
    if not isinstance(name, str) or not MODEL_NAME.match(name.strip()) or ".." in name:
        raise ApiError('name must be a model name such as "qwen2.5:0.5b" (letters, digits, . _ - / :)', 400)
    backend = get_agent().backends.get("ollama")
    return StreamingHttpResponse(_progress(backend.pull(name.strip())), content_type="application/x-ndjson")


async def _progress(lines: AsyncIterator[dict]) -> AsyncIterator[bytes]:
    async for line in lines:
        keep = {k: line[k] for k in ("status", "total", "completed", "error", "cause") if k in line}
        yield (json.dumps(keep) + "\n").encode()
    choice.forget_listings()  # the next turn sees the pulled model


@api_login_required
@json_view("POST")
def connection_test(request: HttpRequest) -> JsonResponse:
    """Settings → Connections → Test (staff): is the server reachable, which version, which models.
    Body `{"kind": "ollama", "url"}` or `{"kind": "openai", "base_url", "key"?, "name"?}` (no key:
    the one stored for `name`)."""
    if not request.user.is_staff:
        raise ApiError("only the owner (a staff account) tests the connections", 403)
    data = parse_json_body(request, allow_empty=False)
    kind = data.get("kind")
    if kind == "ollama":
        url = data.get("url") or connections.ollama_url()
        if not isinstance(url, str) or len(url) > 500:
            raise ApiError("url must be the Ollama server's URL, such as http://localhost:11434", 400)
        backend = OllamaBackend(host=url.strip())
    elif kind == "openai":
        url, key, name = data.get("base_url"), data.get("key"), data.get("name") or "openai"
        if not isinstance(url, str) or not url.strip() or len(url) > 500 or not isinstance(name, str):
            raise ApiError("base_url must be the server's URL, such as http://localhost:8080/v1", 400)
        if key is None:
            stored = connections.server(name)
            key = stored.api_key if stored else ""
        if not isinstance(key, str):
            raise ApiError("key must be text", 400)
        backend = OpenAIBackend(base_url=url.strip(), api_key=key, name=name)
    else:
        raise ApiError('kind must be "ollama" or "openai"', 400)
    return JsonResponse(async_to_sync(_probe)(backend))


async def _probe(backend) -> dict:
    """What Test shows: reachable, the version when the server says, its models (chat / embedding)."""
    try:
        found = await backend.describe_models()
    except LLMError as exc:
        return {"reachable": False, "error": str(exc), "models": []}
    version = ""
    if isinstance(backend, OllamaBackend):
        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                version = (await client.get(f"{backend.host}/api/version")).json().get("version", "")
        except (httpx.HTTPError, ValueError, AttributeError):
            version = ""
    return {"reachable": True, "version": version, "models": found}
