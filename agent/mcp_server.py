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
import functools
import json
from contextvars import ContextVar
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError

from agent.runs import RunActive, get_run_manager
from sessions_app.auth import user_for_token
from sessions_app.models import Session
from tools_app.builtin.memory import MemorySaveTool, MemorySearchTool
from tools_app.context import current_user_id
from tools_app.mcp.config import NAVI_VERSION

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


async def ask(user_id: int, question: str, session_id: str | None) -> dict:
    """One turn in a session of the user (a new one unless `session_id`), waited for."""
    try:
        session = await sync_to_async(_session_for)(user_id, session_id)
    except Exception as exc:  # noqa: BLE001 - a bad id is the client's answer, not a crash
        raise ValueError(str(exc)) from None
    try:
        run = await get_run_manager().start(str(session.pk), question, [], planning=False)
    except RunActive as exc:
        raise ValueError(f"{exc}; wait for it, or use another session") from None
    await asyncio.shield(run.done.wait())
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
    async def ask_navi(question: str, session_id: str | None = None) -> str:
        """Ask Navi (runs one turn with its tools; calls that need approval wait for the owner)."""
        return json.dumps(await ask(_user(), question, session_id), ensure_ascii=False)

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

        manager = StreamableHTTPSessionManager(app=build_server()._lowlevel_server, json_response=True, stateless=True)
        started = asyncio.Event()

        async def hold() -> None:
            async with manager.run():
                started.set()
                await asyncio.Event().wait()

        task = loop.create_task(hold())
        await started.wait()
        self._managers[id(loop)] = (loop, manager, task)
        return manager


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
