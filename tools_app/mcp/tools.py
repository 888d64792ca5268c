"""MCP tools in the tool registry: `<server>__<tool>` for the servers a user may use, their
calls through the hub, and the result converted from MCP content for the model and the page.

Every result is marked untrusted (`untrusted_output`) like a web page, and every tool asks
first (`default_policy = "ask"`) unless the owner set the server or the tool to run without
asking. A failure of any kind is a tool result, never an exception out of the run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import logging
import mimetypes
import time
from typing import Any, Awaitable, Callable

from django.conf import settings
from django.db.models import Q

from navi_project import hotsql, metrics
from sessions_app.models import SessionFile
from tools_app.base import Tool, ToolResult
from tools_app.builtin.session_files import _copy_in, file_url
from tools_app.context import current_chat_session_id, current_event_sink, current_user_id, emit
from tools_app.events import FilePublished, ToolProgress
from tools_app.mcp import client as mcp_client
from tools_app.mcp import transport as mcp_transport
from tools_app.mcp.config import ServerConfig, connect_timeout
from tools_app.mcp.listing import ToolSpec
from tools_app.models import MCPServer

log = logging.getLogger(__name__)


def text_cap() -> int:
    return int(getattr(settings, "MCP_MAX_RESULT_CHARS", 65536))


class MCPTool(Tool):
    """One tool of one MCP server."""

    untrusted_output = True

    def __init__(self, config: ServerConfig, spec: ToolSpec) -> None:
        self.config = config
        self.spec = spec
        self.name = spec.name
        self.description = spec.description
        self.parameters = spec.parameters
        self.keywords = f"{config.name} {spec.remote.replace('_', ' ')}"
        self.origin = f"MCP server '{config.name}'"
        allowed = config.auto_approve or spec.remote in config.auto_approve_tools
        # A tool its server marks read-only (readOnlyHint) runs without asking when the owner
        # trusts such hints (MCP_READ_ONLY_ALLOW); its results are still untrusted data.
        trusted_hint = spec.read_only and bool(getattr(settings, "MCP_READ_ONLY_ALLOW", False))
        self.default_policy = "allow" if allowed or trusted_hint else "ask"

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        hub = mcp_client.get_hub()
        outcome = "error"
        try:
            conn = await hub.run(hub.connection(self.config))
            result = await hub.run(conn.call(self.spec.remote, params, progress_relay(self.name)))
            converted = await convert(result, self.config.name, self.spec.remote)
            outcome = "ok" if converted.success else "tool_error"
            return converted
        except mcp_client.Unavailable as exc:
            outcome = "unavailable"
            return ToolResult(False, error=f"{exc} Tell the user; the server's state is on the settings page.")
        except asyncio.CancelledError:
            outcome = "cancelled"  # Stop or TOOL_TIMEOUT_S: the SDK sent notifications/cancelled
            raise
        except Exception as exc:  # noqa: BLE001 - a server's failure is a result the model reads
            return ToolResult(False, error=_call_error(self.config.name, self.spec.remote, exc))
        finally:
            metrics.mcp_call(self.config.name, outcome)


PROGRESS_EVERY_S = 0.25  # a server may notify thousands of times: the page gets 4 updates a second


def progress_relay(tool: str) -> Callable[[float, float | None, str | None], Awaitable[None]] | None:
    """A progress callback for the hub's loop that puts `tool_progress` events in this run's
    event sink, on the run's own loop (None outside a run: no progressToken is asked for)."""
    sink = current_event_sink.get()
    if sink is None:
        return None
    loop = asyncio.get_running_loop()
    last = {"at": 0.0}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        now = time.monotonic()
        done = total is not None and progress >= total
        if now - last["at"] < PROGRESS_EVERY_S and not done:
            return
        last["at"] = now
        event = ToolProgress(tool=tool, progress=float(progress), total=None if total is None else float(total),
                             message=_one_line(message or ""))
        with contextlib.suppress(RuntimeError):  # the run's loop is gone (the call was cancelled)
            loop.call_soon_threadsafe(sink.put_nowait, event)

    return on_progress


def _one_line(text: str) -> str:
    """A server's progress message, shown as text on the card: one line, bounded."""
    return " ".join(text.split())[:200]


def _call_error(server: str, tool: str, exc: BaseException) -> str:
    from mcp.shared.exceptions import MCPError

    inner = mcp_client.first_error(exc)
    if mcp_client.is_too_large(inner):
        return (f"MCP server '{server}' answered {tool} with too much data ({inner.error.message}); the limit is "
                f"{mcp_transport.max_response_bytes() // (1024 * 1024)} MB (MCP_MAX_RESPONSE_MB). Ask the tool for "
                "less (a narrower query, a page, a limit), or tell the user; the owner can raise the limit.")
    if mcp_client.is_connection_lost(inner):
        return (f"MCP server '{server}' went away during {tool} ({mcp_client.describe(inner)}); the server may "
                "have crashed. Navi reconnects on the next call; tell the user if it keeps failing.")
    if isinstance(inner, MCPError):
        return (f"MCP server '{server}' answered {tool} with an error: {inner.error.message} "
                f"(code {inner.error.code}). Check the arguments, or tell the user.")
    return (f"MCP server '{server}' failed during {tool}: {mcp_client.describe(inner)}. "
            "The server may have crashed; Navi reconnects on the next call.")


# --- results ---------------------------------------------------------------------------------
async def convert(result: Any, server: str, tool: str) -> ToolResult:
    """Text, images (saved as session files, shown as cards), resources, structured content;
    cut to MCP_MAX_RESULT_CHARS for the model, saying so."""
    import mcp.types as types

    parts: list[str] = []
    for block in result.content or []:
        if isinstance(block, types.ImageContent):
            parts.append(await _save_image(block.data, block.mime_type, server, tool))
        else:
            parts.append(block_text(block))
    structured = getattr(result, "structured_content", None)
    if structured is not None and not any(isinstance(b, types.TextContent) for b in result.content or []):
        parts.append(json.dumps(structured, ensure_ascii=False, indent=1))
    text = _cap("\n".join(parts))
    if getattr(result, "is_error", False):
        return ToolResult(False, output=text, error=f"MCP server '{server}': {tool} reported an error (isError)")
    return ToolResult(True, output=text or "(the tool returned no content)")


def block_text(block: Any) -> str:
    """One content block of a tool result or a prompt message as text: text as it is, an
    embedded resource's text under its URI (the caller marks all of it untrusted), the rest
    named. Matched by the block's `type`: content classes differ between SDK versions."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind == "resource":
        return _resource(getattr(block, "resource", None))
    if kind == "resource_link":
        return f"[resource link: {getattr(block, 'uri', '')} ({getattr(block, 'name', '')})]"
    if kind in ("image", "audio"):
        return f"[{kind} ({getattr(block, 'mime_type', None) or 'unknown type'}); not shown]"
    return f"[{kind or 'unknown'} content not shown]"


def _cap(text: str) -> str:
    cap = text_cap()
    if len(text) <= cap:
        return text
    return (text[:cap] + f"\n[cut: the result was {len(text):,} characters; only the first {cap:,} are shown. "
            "Ask the tool for less (a narrower query, a page, a limit).]")


def _resource(resource: Any) -> str:
    uri = str(getattr(resource, "uri", ""))
    text = getattr(resource, "text", None)
    if text is not None:
        return f"[resource {uri}]\n{text}"
    blob = getattr(resource, "blob", "") or ""
    return f"[binary resource {uri} ({getattr(resource, 'mime_type', None) or 'unknown type'}, ~{len(blob) * 3 // 4} bytes); not shown]"


async def _save_image(data: str, mime: str, server: str, tool: str) -> str:
    """Save an image block as a session file and publish it as a card."""
    session_id = current_chat_session_id.get()
    try:
        raw = base64.b64decode(data, validate=True)
    except (ValueError, TypeError):
        return f"[an image from {server} that was not valid base64; dropped]"
    if not session_id:
        return f"[an image ({mime}, {len(raw)} bytes); images are kept only inside a chat]"
    limit = settings.SESSION_FILES_MAX_SIZE_MB * 1024 * 1024
    if len(raw) > limit:
        return f"[an image of {len(raw) // (1024 * 1024)} MB, over the session file limit; dropped]"
    extension = mimetypes.guess_extension(mime or "") or ".bin"
    name = await _copy_in(session_id, io.BytesIO(raw), f"{server}-{tool}{extension}", len(raw))
    if name is None:
        return "[an image that could not be saved (no free file name)]"
    await SessionFile.objects.filter(session_id=session_id, name=name).aupdate(published=True)
    url = file_url(session_id, name)
    emit(FilePublished(name=name, url=url, mime=mime))
    return f"[image saved as the session file '{name}' and shown to the user: {url}]"


# --- the registry's provider ------------------------------------------------------------------
def visible_servers(user_id: int | None, *, enabled: bool | None = True):
    """The servers a user may use: their own and the global ones (sync ORM)."""
    owned = Q(owner__isnull=True) | Q(owner_id=user_id) if user_id is not None else Q(owner__isnull=True)
    rows = MCPServer.objects.filter(owned)
    return rows if enabled is None else rows.filter(enabled=enabled)


class MCPProvider:
    """Gives the registry the MCP tools of a run's user (ToolRegistry.providers)."""

    def __init__(self, registry: Any) -> None:
        # No MCP tool may take a registered tool's name (built-ins, agent tools, user tools).
        mcp_client.reserved_names = lambda: set(list(registry._tools))
        self._visible: dict[int | None, list[ServerConfig]] = {}

    def load(self, user_id: int | None) -> None:
        """Read which servers the user may use (sync ORM, in the run's thread hop). A server
        disabled in another worker process still connected here is closed now."""
        # visible_servers' rows as one prepared statement: this runs at every turn's start (the
        # ORM's query building was a quarter of a routine run's start, bench/README routines).
        owner = hotsql.column(MCPServer, "owner")
        rows = hotsql.select(MCPServer, f"{owner} IS NULL OR {owner} = %s", [user_id], tail="ORDER BY "
                             + hotsql.column(MCPServer, "name")) if user_id is not None else list(
            visible_servers(None, enabled=None))
        self._visible[user_id] = [ServerConfig.from_row(row) for row in rows if row.enabled]
        hub = mcp_client._hub
        for row in rows:
            if not row.enabled and hub is not None and row.pk in hub.connections:
                hub.submit(hub.drop(row.pk, "disabled"))

    def pending(self, user_id: int | None) -> bool:
        """Whether a server the user may use has no open connection (what `prepare` opens)."""
        configs = self._visible.get(user_id) or []
        hub = mcp_client._hub
        return bool(configs) and (hub is None or any(
            (conn := hub.connections.get(c.id)) is None or conn.state != "connected" for c in configs))

    async def prepare(self, user_id: int | None) -> None:
        """Open the connections not open yet (first use), all at once, each bounded."""
        configs = self._visible.get(user_id) or []
        if not configs:
            return
        hub = mcp_client.get_hub()
        await hub.run(_ensure_all(hub, configs))

    def tools(self, user_id: int | None, profile_id: str | None) -> list[Tool]:
        configs = self._visible.get(user_id) or []
        if not configs or mcp_client._hub is None:
            return []
        found: list[Tool] = []
        for config in configs:
            if profile_id is not None and config.profiles and profile_id not in config.profiles:
                continue
            conn = mcp_client._hub.connections.get(config.id)
            if conn is None or conn.state != "connected":
                continue
            for spec in list(conn.specs):
                if config.tool_allowlist and spec.remote not in config.tool_allowlist:
                    continue
                found.append(MCPTool(config, spec))
        return found

    def lookup(self, name: str) -> Tool | None:
        """The tool of this name for the run's user (the registry checks it was offered)."""
        for tool in self.tools(current_user_id.get(), None):
            if tool.name == name:
                return tool
        return None


def listed(user_id: int) -> list[dict[str, Any]]:
    """The MCP tools a user's runs may be offered, for GET /agents/tools (sync ORM): with their
    schema when this process holds the connection, else as the server last listed them."""
    hub = mcp_client._hub
    found: list[dict[str, Any]] = []
    for row in visible_servers(user_id):
        config = ServerConfig.from_row(row)
        conn = hub.connections.get(row.pk) if hub is not None else None
        if conn is not None and conn.specs:
            specs = [{"name": s.name, "description": s.description, "parameters": s.parameters,
                      "read_only": s.read_only, "destructive": s.destructive, "remote": s.remote} for s in conn.specs]
        else:
            specs = [dict(t, parameters=None, remote=t["name"].split("__", 1)[-1])
                     for t in row.tools or [] if not t.get("problem")]
        for spec in specs:
            if config.tool_allowlist and spec["remote"] not in config.tool_allowlist:
                continue
            allowed = row.auto_approve or spec["remote"] in (row.auto_approve_tools or [])
            found.append({"name": spec["name"], "description": spec["description"], "parameters": spec["parameters"],
                          "builtin": False, "mcp_server": row.name, "read_only": bool(spec.get("read_only")),
                          "destructive": bool(spec.get("destructive")), "state": row.state,
                          "allowed": bool(allowed or (spec.get("read_only") and settings.MCP_READ_ONLY_ALLOW))})
    return found


async def _ensure_all(hub: mcp_client.Hub, configs: list[ServerConfig]) -> None:
    await asyncio.gather(*(hub.ensure(c, connect_timeout()) for c in configs), return_exceptions=True)
