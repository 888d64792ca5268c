"""The models the profiles' servers have (`GET /models`), a chat's own model checked against
them (`PATCH /sessions/<id> {"model"}`), and pulling one into Ollama from the page (staff)."""

from __future__ import annotations

import json
import re
from typing import AsyncIterator

from asgiref.sync import async_to_sync
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse

from agent.llm import LLMError, choice
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
        keep = {k: line[k] for k in ("status", "total", "completed", "error") if k in line}
        yield (json.dumps(keep) + "\n").encode()
