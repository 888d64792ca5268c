"""Where a tool call sends data, and whether a tool's output comes from the network.

`destinations` lists the URLs (or bare hosts) a call would contact, so the agent can ask before
a request goes to a host nobody named (an exfiltration through a GET). `reaches_network` says
whether a tool's output may come from outside (a user tool with `network = True`, code_exec
with CODE_EXEC_NETWORK, terminal with TERMINAL_NETWORK). `hosts_in` reads host names out of text.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s<>\"'`)\]}]+", re.IGNORECASE)
# A bare name with a dot and a letter top-level label (example.com, nas.lan:8123), an IPv4
# address, or localhost; each optionally with a port.
_BARE = re.compile(
    r"(?<![\w.-])(?:(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,62}"
    r"|\d{1,3}(?:\.\d{1,3}){3}|localhost)(?::\d{1,5})?(?![\w-])",
    re.IGNORECASE,
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_URL_TOOLS = {"web_view": "url", "http_request": "url"}


def host_key(target: str) -> str:
    """"host" (or "host:port" for a non-default port) of a URL or a bare `host[:port]`; "" if none."""
    target = target.strip()
    if "://" not in target:
        target = "//" + target
    try:
        parts = urlsplit(target)
        host, port = (parts.hostname or "").rstrip(".").lower(), parts.port
    except ValueError:
        return ""
    if not host:
        return ""
    if port is None or port == _DEFAULT_PORTS.get(parts.scheme.lower()) or (not parts.scheme and port in (80, 443)):
        return host
    return f"{host}:{port}"


def targets_in(text: str) -> list[str]:
    """The URLs, and the bare host names outside them (`example.com`, `10.0.0.5:8080`), in a text."""
    urls = [m.group(0) for m in _URL.finditer(text)]
    return urls + [m.group(0) for m in _BARE.finditer(_URL.sub(" ", text))]


def hosts_in(text: str) -> set[str]:
    """Every host named in a text, as `host_key`s."""
    return {host_key(t) for t in targets_in(text)} - {""}


def destinations(tool: Any, params: Any) -> list[str]:
    """The URLs or hosts this call would send a request to ([] when it contacts none we can see)."""
    name = getattr(tool, "name", "")
    args = params if isinstance(params, dict) else {}
    if name in _URL_TOOLS:
        return [str(args.get(_URL_TOOLS[name]) or "")]
    if name == "image_view":
        source = str(args.get("path_or_url") or "").strip()
        return [source] if source.lower().startswith(("http://", "https://")) else []
    if getattr(tool, "network", False) is True:  # a user tool: any host its arguments name
        return sorted({t for text in _strings(args) for t in targets_in(text)})
    return []


def reaches_network(tool: Any) -> bool:
    """May this tool's output come from the network (and so hold someone else's instructions)?"""
    name = getattr(tool, "name", "")
    if name == "code_exec":
        return bool(getattr(settings, "CODE_EXEC_NETWORK", False))
    if name == "terminal":
        return bool(getattr(settings, "TERMINAL_NETWORK", False))
    return getattr(tool, "network", False) is True


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
