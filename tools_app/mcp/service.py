"""What the admin, the REST API, the settings page and `manage.py navi_mcp` share: a server as
JSON (secrets masked), checked edits, and "test connection"."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction

from tools_app.mcp import client as mcp_client
from tools_app.mcp.config import (
    ConfigError,
    ServerConfig,
    check_fields,
    check_name,
    check_transport,
    connect_timeout,
    data_dir,
    is_launcher,
    mask,
    masked,
)
from tools_app.mcp.paths import check_paths
from tools_app.models import MCPServer
from tools_app.permissions import PERMISSION

EDITABLE = ("transport", "command", "args", "env", "url", "headers", "network", "paths", "writable_paths",
            "pending_paths", "enabled", "profiles", "tool_allowlist", "auto_approve", "auto_approve_tools")


IMPORT_MAX = 50
# What a Claude Desktop / LibreChat / VS Code entry may hold; "type" says the transport.
CLAUDE_KEYS = {"command", "args", "env", "url", "headers", "type", "disabled"}


def from_claude_entry(name: Any, entry: Any) -> dict[str, Any]:
    """One `mcpServers` entry as a POST /mcp/servers body (ConfigError says what is wrong)."""
    if not isinstance(entry, dict):
        raise ConfigError('each entry must be an object: {"command", "args", "env"} or {"url", "headers"}')
    unknown = set(entry) - CLAUDE_KEYS
    if unknown:
        raise ConfigError(f"unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(CLAUDE_KEYS))}")
    kind = entry.get("type")
    if kind == "sse":
        raise ConfigError("the old SSE transport is not supported; give the server's streamable-HTTP URL "
                          "(often the same host, path /mcp) instead")
    if kind not in (None, "stdio", "http", "streamable-http", "streamableHttp"):
        raise ConfigError(f'type {kind!r} is not known; use "stdio" or "http" (streamable HTTP)')
    has_url, has_command = "url" in entry, "command" in entry
    if has_url == has_command:
        raise ConfigError('give either "command" (a program run here, stdio) or "url" (an HTTP server), not both')
    body: dict[str, Any] = {"name": name}
    if has_url:
        body.update(transport="http", url=entry["url"], headers=entry.get("headers", {}))
        stray = [key for key in ("args", "env") if key in entry]
    else:
        body.update(transport="stdio", command=entry["command"], args=entry.get("args", []), env=entry.get("env", {}))
        if isinstance(entry["command"], str) and is_launcher(entry["command"]):
            body["network"] = True  # npx/uvx download the server on its first start, as in Claude Desktop
        shown, pending = pasted_paths(body["args"])
        if shown:
            body["paths"] = shown
        if pending:
            body["pending_paths"] = pending
        stray = [key for key in ("headers",) if key in entry]
    if stray:
        raise ConfigError(f"{', '.join(stray)} do(es) not apply to a {body['transport']} server; remove it")
    if "disabled" in entry:
        if not isinstance(entry["disabled"], bool):
            raise ConfigError("disabled must be true or false")
        body["enabled"] = not entry["disabled"]
    return body


def pasted_paths(args: Any) -> tuple[list[str], list[str]]:
    """(shown, pending): the host places a pasted stdio entry's arguments name (Claude Desktop
    runs servers unsandboxed). The npm packages a script lies in (node_modules: code, no data)
    are shown read-only at once; any other folder, or a file's folder, waits until the owner
    confirms it on the card (read-only, or writable if they tick it). Nothing on disk changes."""
    shown: list[str] = []
    pending: list[str] = []
    if not isinstance(args, list):
        return shown, pending
    for arg in args:
        if not isinstance(arg, str) or "\x00" in arg:
            continue
        raw = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg  # --root=/srv/notes
        if not raw.startswith("/") or not os.path.lexists(raw):
            continue
        path = Path(os.path.normpath(raw))
        if "node_modules" in path.parts:  # a package's script needs the packages beside it
            place, into = str(Path(*path.parts[:path.parts.index("node_modules") + 1])), shown
        elif path.is_dir() and not path.is_symlink():
            place, into = str(path), pending
        else:
            place, into = str(path.parent), pending
        if place not in shown and place not in pending:
            into.append(place)
    return shown, pending


def state_of(server: MCPServer) -> str:
    if not server.enabled:
        return MCPServer.State.DISABLED
    live = mcp_client.live_state(server.pk)
    return live[0] if live else server.state


def error_of(server: MCPServer) -> str:
    live = mcp_client.live_state(server.pk) if server.enabled else None
    return live[1][:4000] if live else server.last_error


def as_json(server: MCPServer, *, detail: bool = True) -> dict[str, Any]:
    """The REST shape (DESIGN §9), secrets masked; `detail` adds the configuration."""
    # This process's connection, when it holds one, shows its state and what it listed together;
    # otherwise the row (written by whichever process holds it).
    live = mcp_client.live_listing(server.pk) if server.enabled else None
    shown = live or {"state": state_of(server), "last_error": error_of(server), "tools": server.tools or [],
                     "resources": server.resources or [], "prompts": server.prompts or []}
    data: dict[str, Any] = {
        "id": server.pk, "name": server.name, "transport": server.transport, "enabled": server.enabled,
        "state": shown["state"], "tools": [dict(t) for t in shown["tools"]], "last_error": shown["last_error"],
        "resources": list(shown["resources"]), "prompts": list(shown["prompts"]),
        "global": server.owner_id is None,
    }
    if detail:
        data.update({
            "stderr_tail": server.stderr_tail, "command": server.command, "args": list(server.args or []),
            "env": masked(server.env), "url": server.url, "headers": masked(server.headers),
            "network": server.network, "paths": list(server.paths or []),
            "writable_paths": list(server.writable_paths or []), "pending_paths": list(server.pending_paths or []),
            "profiles": list(server.profiles or []),
            "tool_allowlist": list(server.tool_allowlist or []), "auto_approve": server.auto_approve,
            "auto_approve_tools": list(server.auto_approve_tools or []),
            "state_at": server.state_at.isoformat() if server.state_at else None,
        })
    if server.owner_id is None and detail:
        # Offered to everyone: how it runs is the admin's business, not every user's.
        for key in ("command", "args", "env", "url", "headers", "paths", "writable_paths", "pending_paths",
                    "stderr_tail"):
            data.pop(key, None)
    return data


def merge_secrets(old: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """A value sent back exactly as it was shown (masked) keeps the stored secret."""
    return {key: old[key] if key in old and value == mask(old[key]) else value for key, value in new.items()}


def may_run_stdio(user) -> bool:
    return bool(user.is_staff and user.has_perm(PERMISSION))


def precheck(server: MCPServer, data: dict[str, Any], *, creating: bool) -> None:
    """The checks that need neither the network nor the database (they answer first)."""
    if creating or "name" in data:
        check_name(data.get("name"))
    check_fields({"transport": data.get("transport", server.transport), **data})


def save(server: MCPServer, data: dict[str, Any], user, *, creating: bool) -> MCPServer:
    """Apply a REST body to `server` and save it, or raise ConfigError / PermissionError."""
    if creating or "name" in data:
        server.name = check_name(data.get("name"))
    fields = check_fields({"transport": data.get("transport", server.transport), **data})
    for key in ("env", "headers"):
        if key in fields:
            fields[key] = merge_secrets(getattr(server, key) or {}, fields[key])
    waiting = list(server.pending_paths or [])
    for key in EDITABLE:
        if key in fields:
            setattr(server, key, fields[key])
    confirmed = set(server.paths or []) | set(server.writable_paths or [])
    # A pasted config names its pending folders; a change later only confirms or drops them.
    pending = fields.get("pending_paths", []) if creating else [p for p in fields.get("pending_paths", waiting)
                                                               if p in waiting]
    server.pending_paths = [p for p in pending if p not in confirmed]
    if server.transport == MCPServer.Transport.STDIO and not may_run_stdio(user):
        raise PermissionError(
            "only staff with the 'run host tools' permission may add stdio servers (they run programs on this "
            "machine); add an http server instead, or ask the owner"
        )
    check_transport(server.transport, server.command, server.url)
    if server.transport == MCPServer.Transport.STDIO:
        own = (data_dir(server.pk),) if server.pk else ()
        check_paths([*(server.paths or []), *(server.pending_paths or [])], server.owner_id, allowed=own,
                    writable=server.writable_paths or [])
    if MCPServer.objects.filter(owner__isnull=True, name=server.name).exclude(pk=server.pk).exists():
        raise ConfigError(f"a global server is already called {server.name!r}; choose another name")
    server.state, server.last_error = MCPServer.State.CONNECTING, ""
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        raise ConfigError(f"you already have a server called {server.name!r}; choose another name") from None
    return server


def test_connection(server: MCPServer) -> MCPServer:
    """Close, reconnect at once (no backoff), and return the row with the state it reached."""
    hub = mcp_client.get_hub()
    limit = connect_timeout()
    if server.enabled:
        hub.run_sync(hub.reconnect(ServerConfig.from_row(server), limit), limit + 15)
    mcp_client.flush_state_writes()
    server.refresh_from_db()
    return server


def health_for(user) -> dict[str, Any]:
    """/health's `mcp` key: the enabled servers this user may use that fail, with the reason."""
    rows = MCPServer.objects.filter(enabled=True).filter(owner__isnull=True) | MCPServer.objects.filter(
        enabled=True, owner=user)
    failing = [{"id": s.pk, "name": s.name, "last_error": error_of(s)} for s in rows
               if state_of(s) == MCPServer.State.FAILED]
    return {"status": "failing" if failing else "ok", "servers": rows.count(), "failing": failing}
