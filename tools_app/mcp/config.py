"""What an MCP server's configuration may hold, checked the same way for the admin, REST and
the client: names, transports, the SSRF rule for URLs, secrets shown back masked."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from navi_project import netguard

# What Navi says it is to MCP peers (clientInfo here, serverInfo at /mcp).
NAVI_VERSION = "2026.11"
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
SEPARATOR = "__"
# Names the model sees are `<server>__<tool>`; OpenAI-style APIs cap function names at 64.
MAX_TOOL_NAME = 64


class ConfigError(ValueError):
    """A configuration that cannot be used; the message says what to change."""


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(
            "name must be 1-40 letters, digits, '_' or '-' (it prefixes the tools' names: <name>__<tool>)"
        )
    if SEPARATOR in name:
        raise ConfigError("name must not contain '__' (it separates the server from the tool in tool names)")
    return name


def sanitise_tool_name(name: str) -> str:
    """A server's tool name as it may appear in a function name: [A-Za-z0-9_-] only."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:MAX_TOOL_NAME]


def offered_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{sanitise_tool_name(tool)}"[:MAX_TOOL_NAME]


def _str_list(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{field} must be a list of strings")
    return list(value)


def _str_dict(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f'{field} must be an object of strings, e.g. {{"KEY": "value"}}')
    return dict(value)


def check_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The fields of a server config, type-checked (no network, no filesystem)."""
    clean: dict[str, Any] = {}
    transport = data.get("transport")
    if transport not in ("stdio", "http"):
        raise ConfigError('transport must be "stdio" or "http"')
    clean["transport"] = transport
    for key in ("args", "paths", "writable_paths", "pending_paths", "profiles", "tool_allowlist", "auto_approve_tools"):
        if key in data:
            clean[key] = _str_list(data[key], key)
    for key in ("env", "headers"):
        if key in data:
            clean[key] = _str_dict(data[key], key)
    if "headers" in clean:
        check_headers(clean["headers"])
    if "env" in clean:
        check_env(clean["env"])
    for key in ("args", "paths", "writable_paths", "pending_paths"):
        if any("\x00" in value for value in clean.get(key, [])):
            raise ConfigError(f"{key}: a value holds a NUL byte; remove it")
    for key in ("enabled", "network", "auto_approve"):
        if key in data:
            if not isinstance(data[key], bool):
                raise ConfigError(f"{key} must be true or false")
            clean[key] = data[key]
    for key in ("command", "url"):
        if key in data:
            if not isinstance(data[key], str):
                raise ConfigError(f"{key} must be a string")
            clean[key] = data[key].strip()
    return clean


# Headers an MCP client sets itself: one from a config would smuggle a second request or
# reroute this one (Host), so they are refused rather than sent.
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
                    "keep-alive", "proxy-connection", "proxy-authorization", "expect", "mcp-session-id",
                    "mcp-protocol-version"}
HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")  # an RFC 9110 token
MAX_HEADER_VALUE = 8192
MAX_HEADERS = 30
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_ENV_VALUE = 32768


def check_headers(headers: dict[str, str]) -> None:
    """Header names are tokens, values carry no line breaks or NUL and stay small, and none of
    them is one the HTTP client owns (Host, Content-Length...). The same for every way in: the
    form, POST/PATCH and a pasted config."""
    if len(headers) > MAX_HEADERS:
        raise ConfigError(f"headers: at most {MAX_HEADERS} headers; keep the ones the server needs")
    for name, value in headers.items():
        if not HEADER_NAME_RE.match(name):
            raise ConfigError(f"headers: {name[:40]!r} is not a header name (letters, digits and -, e.g. Authorization)")
        if name.lower() in RESERVED_HEADERS:
            raise ConfigError(f"headers: {name} is set by Navi's HTTP client and may not be given; remove it")
        if any(c in value for c in "\r\n\x00"):
            raise ConfigError(f"headers: the value of {name} holds a line break or NUL; give it on one line")
        if len(value) > MAX_HEADER_VALUE:
            raise ConfigError(f"headers: the value of {name} is longer than {MAX_HEADER_VALUE} characters; shorten it")


def check_env(env: dict[str, str]) -> None:
    """Variable names a shell would accept, values without NUL, of a sane size."""
    if len(env) > 100:
        raise ConfigError("env: at most 100 variables; keep the ones the server needs")
    for name, value in env.items():
        if not ENV_NAME_RE.match(name):
            raise ConfigError(f"env: {name[:40]!r} is not a variable name (letters, digits and _, e.g. API_KEY)")
        if "\x00" in value or len(value) > MAX_ENV_VALUE:
            raise ConfigError(f"env: the value of {name} holds a NUL byte or is longer than {MAX_ENV_VALUE} characters")


def check_transport(transport: str, command: str, url: str) -> None:
    """The one field each transport needs."""
    if transport == "stdio" and not command:
        raise ConfigError("a stdio server needs a command (the program to run)")
    if transport == "http":
        if not url:
            raise ConfigError("an http server needs a url (its streamable-HTTP endpoint, e.g. https://host/mcp)")
        try:
            netguard.parse_url(url)
        except netguard.URLRefused as exc:
            raise ConfigError(f"url: {exc}") from None


async def check_url_reachable(url: str) -> list[str]:
    """The web tools' SSRF rule: a private address only when its host is in HTTP_ALLOWED_HOSTS.
    Returns the checked addresses (the connection is pinned to them: no DNS rebinding)."""
    try:
        return await netguard.resolve_checked(netguard.parse_url(url))
    except netguard.URLRefused as exc:
        raise ConfigError(str(exc)) from None


def resolve_command(command: str) -> str:
    """The program's full path on the host, or a ConfigError saying how to fix it."""
    found = shutil.which(command) if "/" not in command else (command if shutil.which(command) else None)
    if found is None:
        import sys

        venv_bin = f"{sys.prefix}/bin"
        found = shutil.which(command, path=venv_bin)
    if found is None:
        raise ConfigError(
            f"command not found: {command!r}. Install the program, or give its full path "
            "(e.g. /usr/bin/node or the path pip installed it to)"
        )
    return found


def mask(value: str) -> str:
    """A secret shown back: enough to recognise it, never the whole."""
    if len(value) <= 8:
        return "••••"
    return f"{value[:3]}••••{value[-2:]}"


# A header or variable whose name says it holds a secret; the others (X-Team, TZ) are shown.
SECRET_NAME_RE = re.compile(r"auth|token|key|secret|pass|cookie|session|credential|bearer|signature|private",
                            re.IGNORECASE)


def is_secret(name: str, value: str = "") -> bool:
    return bool(SECRET_NAME_RE.search(name) or SECRET_NAME_RE.search(value.split(" ", 1)[0]))


def masked(values: dict[str, str]) -> dict[str, str]:
    """Secrets masked, plain values (a team header, a time zone) shown as they are."""
    return {key: mask(value) if is_secret(key, value) else value for key, value in (values or {}).items()}


@dataclass(frozen=True)
class ServerConfig:
    """A snapshot of one MCPServer row: what a connection was opened with (a changed row
    means a new connection)."""

    id: int
    name: str
    transport: str
    owner_id: int | None
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    network: bool = False
    paths: tuple[str, ...] = ()
    writable_paths: tuple[str, ...] = ()
    pending_paths: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()
    tool_allowlist: tuple[str, ...] = ()
    auto_approve: bool = False
    auto_approve_tools: tuple[str, ...] = ()

    @classmethod
    def from_row(cls, row) -> "ServerConfig":
        return cls(
            id=row.pk, name=row.name, transport=row.transport, owner_id=row.owner_id, command=row.command,
            args=tuple(row.args or ()), env=tuple(sorted((row.env or {}).items())), url=row.url,
            headers=tuple(sorted((row.headers or {}).items())), network=row.network, paths=tuple(row.paths or ()),
            writable_paths=tuple(row.writable_paths or ()), pending_paths=tuple(row.pending_paths or ()),
            profiles=tuple(row.profiles or ()), tool_allowlist=tuple(row.tool_allowlist or ()),
            auto_approve=row.auto_approve, auto_approve_tools=tuple(row.auto_approve_tools or ()),
        )

    def connection_key(self) -> tuple:
        """The fields that need a new connection when they change."""
        return (self.transport, self.command, self.args, self.env, self.url, self.headers, self.network, self.paths,
                self.writable_paths, self.pending_paths)


def connect_timeout() -> float:
    return float(getattr(settings, "MCP_CONNECT_TIMEOUT_S", 10.0))


LAUNCHERS = ("npx", "uvx", "bunx", "pnpx", "pipx")


def is_launcher(command: str) -> bool:
    """A command that downloads the server on its first start (npx -y pkg, uvx pkg)."""
    return command.rsplit("/", 1)[-1] in LAUNCHERS


def data_dir(server_id: int):
    """A stdio server's own persistent, writable folder (its HOME in the sandbox)."""
    from pathlib import Path

    return Path(settings.MCP_DATA_DIR) / str(int(server_id))
