"""One of a server's listed resources read for a chat message (issue 39: a resource attached to
a chat): only the caller's own or a global server, only a URI the server lists, text cut to
MCP_MAX_RESULT_CHARS. The agent wraps the text as untrusted before the model sees it."""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from tools_app.mcp import client as mcp_client
from tools_app.mcp.config import ServerConfig, connect_timeout
from tools_app.mcp.tools import text_cap
from tools_app.models import MCPServer

MAX_URI_CHARS = 2000


class AttachError(Exception):
    """Why a resource cannot be attached; the message says what to do next."""


@dataclass(frozen=True)
class Attached:
    server: str  # the server's name
    uri: str
    name: str  # the name the server lists it under
    text: str  # its text contents, cut to the cap
    cut: bool  # text was longer than MCP_MAX_RESULT_CHARS
    skipped: int  # binary parts left out


def visible_server(user_id: int, server_id: object) -> MCPServer:
    """The caller's own or a global server (another user's is "not found", as in REST)."""
    if not isinstance(server_id, int) or isinstance(server_id, bool):
        raise AttachError("server_id must be the number of one of your MCP servers (GET /mcp/servers)")
    server = MCPServer.objects.filter(Q(owner_id=user_id) | Q(owner__isnull=True), pk=server_id).first()
    if server is None:
        raise AttachError(f"no MCP server {server_id}; GET /mcp/servers lists yours")
    if not server.enabled:
        raise AttachError(f"MCP server '{server.name}' is disabled; enable it in Settings, then send again")
    return server


async def read_listed(server: MCPServer, uri: object) -> Attached:
    """Read `uri` on this process's connection to `server`, if the server lists it."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_CHARS:
        raise AttachError("uri must be one of the server's resources (its \"resources\" in GET /mcp/servers)")
    from mcp.shared.exceptions import MCPError

    hub = mcp_client.get_hub()
    config = ServerConfig.from_row(server)

    async def go():
        conn = await hub.connection(config)
        await conn.ensure(connect_timeout())
        if conn.state != "connected":
            raise mcp_client.Unavailable(conn.unavailable_reason())
        listed = next((r for r in conn.resources if r["uri"] == uri), None)
        if listed is None:
            raise AttachError(f"MCP server '{server.name}' does not list the resource {uri[:200]!r}; pick one of "
                              "its resources from the list")
        return listed, await conn.read_resource(uri)

    limit = connect_timeout() + float(getattr(settings, "TOOL_TIMEOUT_S", 60))
    try:
        # A fresh context: a REST request's ThreadSensitiveContext would send the connection's
        # own database look-ups (the SSRF guard's allowed hosts) to the request's busy thread.
        future = contextvars.Context().run(hub.submit, asyncio.wait_for(go(), limit))
        listed, result = await asyncio.wrap_future(future)
    except mcp_client.Unavailable as exc:
        raise AttachError(f"{exc}; the message was not sent, send it again once the server is back") from None
    except MCPError as exc:
        raise AttachError(f"MCP server '{server.name}' could not read {uri[:200]!r}: {exc.error.message}; check the "
                          "server's state in Settings, then send again") from None
    except TimeoutError:
        raise AttachError(f"MCP server '{server.name}' did not answer within {limit:g} s; try again later") from None
    except AttachError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken connection is the owner's to see, not a crash
        raise AttachError(f"MCP server '{server.name}' could not read {uri[:200]!r}: {mcp_client.describe(exc)}; "
                          "check the server in Settings, then send again") from None
    return _text_of(server.name, uri, listed.get("name") or uri, result.contents)


def _text_of(server: str, uri: str, name: str, contents) -> Attached:
    cap = text_cap()
    parts, skipped = [], 0
    for item in contents:
        text = getattr(item, "text", None)
        if text is None:
            skipped += 1
        else:
            parts.append(text)
    text = "\n\n".join(parts)
    return Attached(server, uri, name, text[:cap], len(text) > cap, skipped)
