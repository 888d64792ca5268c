"""Apprise: one URL (ntfy://, json://, tgram://, mailto://…) reaches any of ~100 services.

The URL is a secret (tokens, passwords, private topics live in it): it is stored, never shown
back; `redact` keeps the scheme and host. Apprise opens its own connections, so while it sends
in its worker thread, every connect (urllib3's and socket.create_connection) goes through
navi_project.netguard: a LAN or loopback address is refused unless HTTP_ALLOWED_HOSTS lists it,
and the connection goes to the very address that was checked.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

import apprise
import urllib3.util.connection
from django.conf import settings

from navi_project import netguard

from .senders import BadTarget, DeliveryFailed, Notification

MAX_URL = 2000
_local = threading.local()  # .guard: connects are checked in this thread; .refused: why one was not
_installed = False


def _guarded(original: Callable[..., socket.socket]) -> Callable[..., socket.socket]:
    def create_connection(address, *args, **kwargs):
        if getattr(_local, "guard", False):
            host, port = address[0], int(address[1])
            try:
                address = (netguard.resolve_checked_sync(host, port)[0], port, *address[2:])
            except netguard.URLRefused as exc:
                _local.refused = str(exc)
                raise ConnectionRefusedError(str(exc)) from None
        return original(address, *args, **kwargs)

    return create_connection


def install_connect_guard() -> None:
    """Wrap the two connect functions Apprise's plugins use (once; a no-op outside its sends)."""
    global _installed
    if not _installed:
        urllib3.util.connection.create_connection = _guarded(urllib3.util.connection.create_connection)
        socket.create_connection = _guarded(socket.create_connection)
        _installed = True


def _instantiate(url: str):
    return apprise.Apprise.instantiate(url, suppress_exceptions=True)


def _network_host(plugin: Any) -> str | None:
    """The plugin's host when it looks like a host name (tgram's "host" is a bot id, not a host)."""
    host = getattr(plugin, "host", None)
    if isinstance(host, str) and host and ("." in host or ":" in host or host == "localhost"):
        return host
    return None


def redact(url: str) -> str:
    """`ntfys://user:pass@ntfy.sh/topic123` → `ntfys://…@ntfy.sh/top***`: scheme and host only.

    Built on Apprise's own privacy form (it masks tokens that sit in the host part, like
    Telegram's bot token), then user, password, path and query are hidden as well."""
    plugin = _instantiate(url)
    shown = plugin.url(privacy=True) if plugin is not None else url
    try:
        parts = urlsplit(shown)
        netloc = parts.netloc
    except ValueError:
        return "(unreadable URL)"
    auth, _, hostport = netloc.rpartition("@")
    host = hostport if ("." in hostport or ":" in hostport) else (hostport[:1] + "***" if hostport else "")
    path = parts.path.strip("/")
    return f"{parts.scheme}://{'…@' if auth else ''}{host}{'/' + path[:3] + '***' if path else ''}"


def _secrets(url: str) -> list[str]:
    """The parts of `url` that must not appear in an error message."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    pieces = [url, parts.netloc, parts.path, parts.query, parts.username or "", parts.password or ""]
    pieces += parts.path.split("/") + [v for p in parts.query.split("&") for v in p.split("=")[1:]]
    if not _network_host(_instantiate(url)):
        pieces.append(parts.hostname or "")
    return sorted({unquote(p) for p in pieces if len(p) >= 4} | {p for p in pieces if len(p) >= 4}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


class _ThreadRecords(logging.Handler):
    """Apprise's warnings from this thread only: the reason a send failed (targets send at once)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.messages.append(record.getMessage())


def _send_blocking(url: str, note: Notification, timeout: float) -> str:
    """Send in this (worker) thread with the connect guard on; the error text, or "" when sent."""
    plugin = _instantiate(url)
    if plugin is None:
        return "Apprise cannot read this URL any more; remove the target and add it again"
    plugin.socket_connect_timeout = min(plugin.socket_connect_timeout, timeout)
    plugin.socket_read_timeout = timeout
    records = _ThreadRecords()
    logger = logging.getLogger("apprise")
    logger.addHandler(records)
    _local.guard, _local.refused = True, None
    try:
        body = note.body
        if settings.NAVI_PUBLIC_URL and note.url:
            body = f"{body}\n\n{settings.NAVI_PUBLIC_URL.rstrip('/')}{note.url}"
        sent = plugin.notify(body=body or note.title, title=note.title)
    finally:
        _local.guard = False
        logger.removeHandler(records)
    if sent:
        return ""
    if _local.refused:
        return _local.refused
    reason = records.messages[-1] if records.messages else "the service did not accept the message"
    return f"{reason.rstrip('.')}. Check the URL and that the service is up"


class AppriseSender:
    kind = "apprise"

    def clean(self, data: dict[str, Any]) -> dict[str, Any]:
        url = data.get("url")
        if not isinstance(url, str) or not url.strip() or len(url) > MAX_URL:
            raise BadTarget("'url' must be an Apprise URL such as ntfys://ntfy.sh/your-topic or json://host/path")
        url = url.strip()
        plugin = _instantiate(url)
        if plugin is None:
            raise BadTarget(
                f"Apprise cannot read this URL (scheme '{urlsplit(url).scheme or 'none'}'); "
                "see the Apprise wiki for the URL format of your service"
            )
        if host := _network_host(plugin):
            port = getattr(plugin, "port", None) or (443 if getattr(plugin, "secure", False) else 80)
            try:
                netguard.resolve_checked_sync(host, int(port))
            except netguard.HostUnresolved:
                pass  # checked again, connect by connect, at every delivery
            except netguard.URLRefused as exc:
                raise BadTarget(scrub(str(exc), url)) from None
        return {"url": url}

    def describe(self, target: Any) -> str:
        return redact(target.url)

    async def send(self, target: Any, note: Notification) -> None:
        timeout = settings.NOTIFY_TIMEOUT_S
        error = await asyncio.to_thread(_send_blocking, target.url, note, timeout)
        if error:
            raise DeliveryFailed(scrub(error, target.url))
