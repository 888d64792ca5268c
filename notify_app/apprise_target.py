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

from django.conf import settings

from navi_project import netguard
from navi_project.lazy import lazy_module

from .senders import BadTarget, DeliveryFailed, Notification

MAX_URL = 2000
# Plugins that act on the server machine itself (its desktop, its syslog) or send raw UDP that
# the connect guard does not see: not notification targets for a user.
LOCAL_PLUGINS = {"dbus", "glib", "gnome", "macosx", "windows", "syslog", "rsyslog"}
_local = threading.local()  # .guard: connects are checked in this thread; .refused: why one was not
_install_lock = threading.Lock()
_installed = False
# ~150 ms of boot together; imported by the first Apprise target read or sent, guard installed first.
apprise = lazy_module("apprise")
urllib3_connection = lazy_module("urllib3.util.connection")


def _guarded(original: Callable[..., socket.socket]) -> Callable[..., socket.socket]:
    def create_connection(address, *args, **kwargs):
        if not getattr(_local, "guard", False):
            return original(address, *args, **kwargs)
        host, port = address[0], int(address[1])
        try:
            checked = netguard.resolve_checked_sync(host, port)
        except netguard.URLRefused as exc:
            _local.refused = str(exc)
            raise ConnectionRefusedError(str(exc)) from None
        error: OSError | None = None
        for ip in checked:  # the checked addresses only, in order (IPv6 first may be unreachable)
            try:
                return original((ip, port, *address[2:]), *args, **kwargs)
            except OSError as exc:
                error = exc
        raise error or ConnectionRefusedError(f"could not connect to {host}")

    return create_connection


def install_connect_guard() -> None:
    """Wrap the two connect functions Apprise's plugins use (once; a no-op outside its sends)."""
    global _installed
    with _install_lock:  # the first use may come from two threads at once: wrap only once
        if not _installed:
            urllib3_connection.create_connection = _guarded(urllib3_connection.create_connection)
            socket.create_connection = _guarded(socket.create_connection)
            _installed = True


def _instantiate(url: str):
    """Apprise's plugin for `url` (None when it cannot read it); every use of Apprise starts here."""
    if not _installed:
        install_connect_guard()
    return apprise.Apprise.instantiate(url, suppress_exceptions=True)


def _local_problem(plugin: Any) -> str:
    """Why this plugin may not be a target ("" = it may)."""
    if type(plugin).__module__.rsplit(".", 1)[-1] in LOCAL_PLUGINS:
        return (
            f"Apprise's {type(plugin).__module__.rsplit('.', 1)[-1]} plugin notifies the server machine itself "
            "(or sends unchecked UDP), not you; use a service such as ntfy, Gotify, Telegram, mail or json://"
        )
    return ""


def _network_host(plugin: Any) -> str | None:
    """The plugin's host when it looks like a host name (tgram's "host" is a bot id, not a host)."""
    host = getattr(plugin, "host", None)
    if isinstance(host, str) and host and ("." in host or ":" in host or host == "localhost"):
        return host
    return None


def redact(url: str) -> str:
    """`ntfys://user:pass@ntfy.sh/topic123` → `ntfys://…@ntfy.sh/top***`: scheme and host only.

    Built on Apprise's own reading of the URL: a "host" that is really a token (Telegram's bot
    id, a cloud ntfy topic) is hidden too; user, password, path and query always are."""
    plugin = _instantiate(url)
    try:
        parts = urlsplit(plugin.url(privacy=True) if plugin is not None else url)
        auth, _, hostport = parts.netloc.rpartition("@")
    except ValueError:
        return "(unreadable URL)"
    if plugin is None or not _network_host(plugin):
        hostport = hostport[:1] + "***" if hostport else ""
    path = parts.path.strip("/")
    return f"{parts.scheme}://{'…@' if auth else ''}{hostport}{'/' + path[:3] + '***' if path else ''}"


def _secrets(url: str) -> list[str]:
    """The parts of `url` that must not appear in an error message."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    auth = parts.netloc.rpartition("@")[0]  # host and port alone may be named; user info may not
    pieces = [url, auth, parts.path, parts.query, parts.username or "", parts.password or ""]
    pieces += parts.path.split("/") + [v for p in parts.query.split("&") for v in p.split("=")[1:]]
    if not _network_host(_instantiate(url)):
        pieces.append(parts.hostname or "")
    return sorted(
        {unquote(p) for p in pieces if len(p) >= 4} | {p for p in pieces if len(p) >= 4}, key=len, reverse=True
    )


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
    if problem := _local_problem(plugin):
        return problem
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
        if problem := _local_problem(plugin):
            raise BadTarget(problem)
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
