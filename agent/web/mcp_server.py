"""Navi as an MCP server (issue #28 item 6): `memory_search`, `memory_save`, `list_sessions` and
`ask_navi` for another MCP client (an IDE agent, a desktop app), acting as one Navi user.

Two doors, one server built with the SDK's MCPServer:
- streamable HTTP at `/mcp` (navi_project.asgi routes it here): every request needs
  `Authorization: Bearer <API token>`; the token's user is who the tools act as. Stateless
  (a fresh transport per request), so no session of one user can be reached with another's token.
- `manage.py navi_mcp serve --user NAME`: stdio, for a client on this machine.

`ask_navi` runs one turn through the run manager like the web chat: the owner's approvals
apply (a call that asks waits for an answer on the page, or times out as declined).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from contextvars import ContextVar
from typing import Any, Awaitable, Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError

from agent.runs.manager import RunActive, get_run_manager
from navi_project.lazy import lazy_module
from sessions_app.auth import user_for_token
from sessions_app.models import Session
from tools_app.builtin.memory import MemorySaveTool, MemorySearchTool
from tools_app.context import current_user_id
from tools_app.mcp.config import NAVI_VERSION

# The SDK (~600 ms of pydantic models) is imported by /mcp's first request, not at boot; it
# resolves ask_navi's hint "mcpserver.Context" in this module's globals then.
mcpserver = lazy_module("mcp.server.mcpserver")

PROGRESS_EVERY_S = 10.0
Progress = Callable[[float, str], Awaitable[None]]
# The session of each ask_navi call in flight here, by (user, JSON-RPC request id): a stateless
# request's notifications/cancelled arrives on another POST, which stops the run through this.
in_flight: dict[tuple[int, str], str] = {}

# The Navi user the tools act as (set per HTTP request from the token, once for stdio).
acting_user: ContextVar[int | None] = ContextVar("navi_mcp_user", default=None)


def _user() -> int:
    user_id = acting_user.get()
    if user_id is None:
        raise PermissionError("no Navi user for this request; send 'Authorization: Bearer <API token>'")
    return user_id


async def _memory(tool, params: dict[str, Any]) -> str:
    token = current_user_id.set(_user())
    try:
        result = await tool.execute(params)
    finally:
        current_user_id.reset(token)
    if not result.success:
        raise ValueError(result.error or "failed")
    return result.output


def _sessions(user_id: int, limit: int) -> list[dict]:
    rows = Session.objects.filter(owner_id=user_id).order_by("-pinned", "-last_active")[:limit]
    return [{"id": str(s.pk), "title": s.title, "profile_id": s.profile_id, "pinned": s.pinned,
             "last_active": s.last_active.isoformat() if s.last_active else None} for s in rows]


def _session_for(user_id: int, session_id: str | None) -> Session:
    if session_id:
        try:
            session = Session.objects.filter(owner_id=user_id, pk=session_id).first()
        except (ValueError, DjangoValidationError):
            session = None
        if session is None:
            raise ValueError(f"no session {session_id!r} of yours; call list_sessions, or leave session_id out")
        return session
    return Session.objects.create(owner_id=user_id, profile_id=settings.NAVI_DEFAULT_PROFILE)


async def ask(user_id: int, question: str, session_id: str | None, *, progress: Progress | None = None,
              request: tuple[int, str] | None = None) -> dict:
    """One turn in a session of the user (a new one unless `session_id`), waited for; `progress`
    is told every PROGRESS_EVERY_S (the client does not time out), and cancelling this call
    (notifications/cancelled, the client hanging up) stops the run."""
    try:
        session = await sync_to_async(_session_for)(user_id, session_id)
    except Exception as exc:  # noqa: BLE001 - a bad id is the client's answer, not a crash
        raise ValueError(str(exc)) from None
    try:
        run = await get_run_manager().start(str(session.pk), question, [], planning=False)
    except RunActive as exc:
        raise ValueError(f"{exc}; wait for it, or use another session") from None
    if request is not None:
        in_flight[request] = str(session.pk)
    waited = 0.0
    try:
        while not run.done.is_set():
            try:
                await asyncio.wait_for(asyncio.shield(run.done.wait()), PROGRESS_EVERY_S)
            except asyncio.TimeoutError:
                waited += PROGRESS_EVERY_S
                if progress is not None:
                    await progress(waited, f"Navi is still working ({waited:.0f} s); a tool call may be "
                                           "waiting for the owner's approval on the page")
    except asyncio.CancelledError:
        await asyncio.shield(get_run_manager().request_stop(str(session.pk)))
        raise
    finally:
        if request is not None:
            in_flight.pop(request, None)
    if run.error:
        raise ValueError(f"the run failed: {run.error}")
    if run.stopped and not run.answered:
        raise ValueError("the run was stopped before it finished")
    return {"session_id": str(session.pk), "answer": run.final_content or ""}


def build_server():
    """The SDK server with Navi's four tools."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("navi", version=NAVI_VERSION,
                       instructions="Navi's memory about its owner, their chats, and Navi itself.")

    def guarded(fn):
        """The client reads why a call failed (the SDK hides other exceptions' text)."""

        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            try:
                return await fn(*args, **kwargs)
            except (ValueError, PermissionError) as exc:
                raise ToolError(str(exc)) from None

        return wrapper

    @server.tool()
    @guarded
    async def memory_search(query: str, limit: int = 15) -> str:
        """Search Navi's long-term memory facts about its user by keywords."""
        return await _memory(MemorySearchTool(), {"query": query, "limit": limit})

    @server.tool()
    @guarded
    async def memory_save(category: str, key: str, value: str) -> str:
        """Remember a fact about the user in Navi's memory (a category, a short key, the value)."""
        return await _memory(MemorySaveTool(), {"category": category, "key": key, "value": value})

    @server.tool()
    @guarded
    async def list_sessions(limit: int = 20) -> str:
        """The user's Navi chats, pinned first, then the most recent."""
        rows = await sync_to_async(_sessions)(_user(), max(1, min(int(limit), 200)))
        return json.dumps(rows, ensure_ascii=False)

    @server.tool()
    @guarded
    async def ask_navi(question: str, ctx: mcpserver.Context, session_id: str | None = None) -> str:
        """Ask Navi (runs one turn with its tools; calls that need approval wait for the owner)."""
        user_id = _user()

        async def progress(done: float, message: str) -> None:
            await ctx.report_progress(done, None, message)  # sent only when the client gave a progressToken

        answer = await ask(user_id, question, session_id, progress=progress, request=(user_id, ctx.request_id))
        return json.dumps(answer, ensure_ascii=False)

    return server


# --- streamable HTTP at /mcp -------------------------------------------------------------------
class HTTPEndpoint:
    """The ASGI app behind `/mcp`: Bearer token → user, then the SDK's stateless transport.
    The SDK's session manager needs a running task group: one per event loop, started on the
    first request (daphne sends no lifespan events)."""

    def __init__(self) -> None:
        self._managers: dict[int, Any] = {}

    async def __call__(self, scope, receive, send) -> None:
        user_id = await _token_user(scope)
        if user_id is None:
            return await _json(send, 401, {"error": "MCP at /mcp needs 'Authorization: Bearer <API token>'; "
                                                     "create one on /settings or with manage.py navi_token"})
        manager = await self._manager()
        receive = await _watch_cancel(user_id, scope, receive)
        token = acting_user.set(user_id)
        try:
            await manager.handle_request(scope, receive, send)
        finally:
            acting_user.reset(token)

    async def _manager(self):
        loop = asyncio.get_running_loop()
        entry = self._managers.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        # SSE answers (not one JSON body): progress notifications reach the client during a long turn.
        manager = StreamableHTTPSessionManager(app=build_server()._lowlevel_server, json_response=False, stateless=True)
        started = asyncio.Event()

        async def hold() -> None:
            async with manager.run():
                started.set()
                await asyncio.Event().wait()

        task = loop.create_task(hold())
        await started.wait()
        self._managers[id(loop)] = (loop, manager, task)
        return manager


PEEK_MAX = 64 * 1024  # a cancellation is small; a bigger body is passed on unread


async def _watch_cancel(user_id: int, scope, receive):
    """Read a small POST body first: a notifications/cancelled for one of this user's ask_navi
    calls stops its run (stateless: the call it cancels runs on another request). The body is
    then handed on to the SDK unchanged."""
    if scope.get("method") != "POST":
        return receive
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body") or size > PEEK_MAX:
            break
    if size <= PEEK_MAX and messages[-1]["type"] == "http.request" and not messages[-1].get("more_body"):
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            body = json.loads(b"".join(m.get("body", b"") for m in messages))
            for item in body if isinstance(body, list) else [body]:
                if item.get("method") == "notifications/cancelled":
                    session_id = in_flight.get((user_id, str((item.get("params") or {}).get("requestId"))))
                    if session_id is not None:
                        await get_run_manager().request_stop(session_id)

    async def replay():
        return messages.pop(0) if messages else await receive()

    return replay


async def _token_user(scope) -> int | None:
    raw = None
    for name, value in scope.get("headers") or []:
        if name == b"authorization":
            text = value.decode("latin-1")
            if text[:7].lower() == "bearer ":
                raw = text[7:].strip()
    if not raw:
        return None
    user = await sync_to_async(user_for_token)(raw)
    return user.pk if user is not None else None


async def _json(send, status: int, body: dict) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": payload})


endpoint = HTTPEndpoint()


# --- stdio: manage.py navi_mcp serve -----------------------------------------------------------
def serve_stdio(user_id: int) -> None:
    """Serve Navi over stdin/stdout as this user until the client hangs up."""
    acting_user.set(user_id)
    build_server().run("stdio")
