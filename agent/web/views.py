"""REST views of the agent: profiles, tools, a non-streaming message, stop."""

from __future__ import annotations

import asyncio

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from agent.context import prompts, window
from agent.llm import LLMModelMissing, LLMUnreachable, llmcalls
from agent.models import Profile
from agent.registry import get_agent
from agent.runs.manager import RunActive, get_run_manager
from agent.toolcalling import reliability as counters
from agent.toolcalling import toolselect
from agent.trust import approvals
from agent.web.consumers import MAX_CONTENT_CHARS, MAX_IMAGES, FrameError, decode_image
from agent.web.mcp_attach import AttachError, resource_blocks
from navi_project import jsonsafe
from navi_project.http import json_error, json_view
from navi_project.redis_layer import LayerUnavailable
from sessions_app.auth import api_login_required, unauthenticated_response
from sessions_app.history import HistoryError
from sessions_app.models import Session
from tools_app.mcp import tools as mcp_tools


@api_login_required
@json_view("GET")
def profiles(request: HttpRequest) -> JsonResponse:
    tools = get_agent().tools
    return JsonResponse(
        {"profiles": [dict(p.as_dict(), prompt_tokens=_prompt_size(p, tools)) for p in Profile.objects.order_by("id")]}
    )


def _prompt_size(profile: Profile, registry) -> dict:
    """Estimated tokens every call of this profile starts with: system prompt and tool schemas
    (all of the profile's tools; `max_tools` sends fewer), so a small window can be planned for."""
    tools = registry.tools_for(profile.enabled_tools)
    system = window.estimate_text(prompts.system_prompt(profile))
    full = window.estimate_schemas(toolselect.schemas(tools, compact_form=False))
    compact = window.estimate_schemas(toolselect.schemas(tools, compact_form=True))
    return {
        "system": system,
        "tools": full,
        "tools_compact": compact,
        "tool_count": len(tools),
        "total": system + (compact if profile.compact_schemas else full),
    }


@api_login_required
@json_view("GET")
def tools(request: HttpRequest) -> JsonResponse:
    registry = get_agent().tools
    return JsonResponse(
        {
            "tools": [
                {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "builtin": registry.is_builtin(t.name),
                }
                for t in registry.all()
            ]
            + mcp_tools.listed(request.user.pk)
        }
    )


async def reliability(request: HttpRequest) -> HttpResponse:
    """How well each model calls tools (ModelReliability counters), for /debug. The counters
    add up every user's runs, so only staff read them."""
    user = await _user(request)
    if user is None:
        return unauthenticated_response()
    if not user.is_staff:
        return json_error("the reliability counters cover every user's runs, so only staff can read them; ask the owner, or see the admin", 403)

    return JsonResponse({"models": await counters.table()})


async def session_llm_calls(request: HttpRequest, session_id: str) -> HttpResponse:
    """Every LLM call of a session grouped by user message (run), with its purpose and cost."""
    session, error = await _owned_session(request, session_id)
    if error:
        return error

    return JsonResponse({"session_id": str(session.pk), "runs": await llmcalls.for_session(session.pk)})


# --- async views (they drive runs on the server's event loop) --------------------------------
async def _user(request: HttpRequest):
    if getattr(request, "navi_token_auth", False):
        return request.user
    user = await request.auser()
    return user if user.is_authenticated else None


async def _owned_session(request: HttpRequest, session_id: str) -> tuple[Session | None, JsonResponse | None]:
    """(session, None) or (None, error response): auth, method-independent checks, ownership."""
    user = await _user(request)
    if user is None:
        return None, unauthenticated_response()
    session = await Session.objects.owned_by(user, session_id).afirst()
    if session is None:
        return None, JsonResponse({"error": f"no session '{session_id}'"}, status=404)
    return session, None


def _method_not_allowed(request: HttpRequest, allowed: str) -> JsonResponse:
    response = JsonResponse({"error": f"method {request.method} not allowed here; use {allowed}"}, status=405)
    response["Allow"] = allowed
    return response


async def _owned_post(request: HttpRequest, session_id: str) -> tuple[Session | None, dict, JsonResponse | None]:
    """(session, JSON body, None) for a POST on the caller's own session, else the error to
    return: 401, 404 (someone else's id too), 405, or 400 for a body that is not a JSON object."""
    session, error = await _owned_session(request, session_id)
    if error:
        return None, {}, error
    if request.method != "POST":
        return None, {}, _method_not_allowed(request, "POST")
    body, error = _body(request)
    return (None, {}, error) if error else (session, body, None)


def _body(request: HttpRequest) -> tuple[dict, JsonResponse | None]:
    try:
        body = jsonsafe.loads(request.body or b"{}")
    except jsonsafe.NonFiniteNumber as exc:
        return {}, JsonResponse({"error": f"request body holds a number JSON cannot hold: {exc}"}, status=400)
    except (ValueError, UnicodeDecodeError) as exc:
        return {}, JsonResponse({"error": f"request body is not valid JSON: {exc}"}, status=400)
    if not isinstance(body, dict):
        return {}, JsonResponse({"error": "request body must be a JSON object"}, status=400)
    return body, None


def _content(body: dict, has_images: bool) -> tuple[str, JsonResponse | None]:
    content = body.get("content")
    if content is not None and not isinstance(content, str):
        return "", JsonResponse({"error": '"content" must be text'}, status=400)
    content = content or ""
    if not content.strip() and not has_images:
        return "", JsonResponse({"error": '"content" is required and must be non-empty text (or send "images")'}, status=400)
    if len(content) > MAX_CONTENT_CHARS:
        return "", JsonResponse({"error": f"content is over {MAX_CONTENT_CHARS} characters"}, status=413)
    return content, None


async def session_messages(request: HttpRequest, session_id: str) -> HttpResponse:
    """Send a message and wait for the whole answer (`Agent.run`: no planning)."""
    session, body, error = await _owned_post(request, session_id)
    if error:
        return error
    raw_images = body.get("images") or []
    if not isinstance(raw_images, list) or len(raw_images) > MAX_IMAGES:
        return JsonResponse({"error": f'"images" must be a list of at most {MAX_IMAGES} base64 strings'}, status=400)
    try:
        images = [decode_image(i) for i in raw_images]
    except FrameError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    content, error = _content(body, bool(images))
    if error:
        return error
    try:
        content += await resource_blocks(session.owner_id, body.get("mcp_resources"))
    except AttachError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return await _run_and_wait(session, content, images)


async def session_edit(request: HttpRequest, session_id: str, message_id: str) -> HttpResponse:
    """Edit & resend: body {"content"}; the turns after the message are dropped, then it waits
    for the new answer like POST /sessions/<id>/messages."""
    session, body, error = await _owned_post(request, session_id)
    if error:
        return error
    if not message_id.isdigit():
        return JsonResponse({"error": f"no message '{message_id}' (message ids are integers)"}, status=404)
    content, error = _content(body, False)
    if error:
        return error
    return await _run_and_wait(session, content, [], mode="edit", message_id=int(message_id))


async def session_regenerate(request: HttpRequest, session_id: str) -> HttpResponse:
    """Answer the last user message again (the last answer is replaced); waits for it."""
    session, _, error = await _owned_post(request, session_id)
    if error:
        return error
    return await _run_and_wait(session, "", [], mode="regenerate")


async def _run_and_wait(session: Session, content: str, images: list[str], **mode) -> JsonResponse:

    try:
        run = await get_run_manager().start(str(session.pk), content, images, planning=False, **mode)
    except RunActive as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    except HistoryError as exc:
        return JsonResponse({"error": exc.message}, status=exc.status)
    await asyncio.shield(run.done.wait())  # a dropped client does not cancel the run
    if run.error:
        status = ERROR_STATUS.get(run.error_code, 502)
        return JsonResponse({"error": run.error, "run_id": run.run_id}, status=status)
    if run.stopped and not run.answered:
        return JsonResponse({"error": "the run was stopped before it finished", "run_id": run.run_id}, status=409)
    return JsonResponse(
        {"content": run.final_content or "", "context_tokens": run.context_tokens, "run_id": run.run_id,
         **({"sources": run.sources} if run.sources else {})}  # the passages the answer cites, when it cites any
    )


# The HTTP status of a run that ended with an error frame, by the frame's code; 502 otherwise
# (the LLM server answered, but not usefully).
ERROR_STATUS = {"llm_unreachable": 503}


async def session_stop(request: HttpRequest, session_id: str) -> HttpResponse:
    session, _, error = await _owned_post(request, session_id)
    if error:
        return error
    try:
        stopped = await get_run_manager().request_stop(str(session.pk))
    except LayerUnavailable:  # the run is another worker's, and Redis is down: nobody can tell it
        return JsonResponse({"error": "the run is on another server process and the message bus (Redis) is down; "
                                      "try again in a few seconds"}, status=503)
    if stopped:
        return JsonResponse({"ok": True})
    return JsonResponse({"ok": False, "reason": "no active run"})


async def session_approval(request: HttpRequest, session_id: str, approval_id: str) -> HttpResponse:
    """Answer a pending approval: body {"decision": "approve"|"deny", "remember"?: "session"}."""
    session, body, error = await _owned_post(request, session_id)
    if error:
        return error
    user = await _user(request)
    try:
        decision = await approvals.answer(
            str(session.pk), approval_id, body.get("decision"), body.get("remember"), user.pk
        )
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except approvals.ApprovalNotFound as exc:
        return JsonResponse({"error": str(exc)}, status=404)
    except approvals.ApprovalAlreadyAnswered as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"ok": True, "approval_id": approval_id, "decision": decision})


__all__ = ["profiles", "tools", "session_messages", "session_edit", "session_regenerate", "session_stop", "session_approval", "LLMModelMissing", "LLMUnreachable"]


@login_required
def chat_page(request: HttpRequest) -> HttpResponse:
    return render(request, "chat.html")


@login_required
def debug_page(request: HttpRequest) -> HttpResponse:
    """The LLM calls and contexts of every chat: the owner's (staff) tool, not a user's."""
    if not request.user.is_staff:
        return HttpResponse("The debug page is for the owner (a staff account).", status=403, content_type="text/plain")
    return render(request, "debug.html")


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    return render(request, "settings.html")


@login_required
def memory_page(request: HttpRequest) -> HttpResponse:
    return render(request, "memory.html")
