"""Outbound HTTP to addresses a user or the model chose (web tools, notification targets),
guarded against SSRF. One implementation for every app: tools_app and notify_app import it.

Every hop (the first URL and each redirect, followed here by hand, at most MAX_REDIRECTS) is
checked: only http/https; non-canonical numeric hosts (`2130706433`, `0177.0.0.1`,
`0x7f000001`, `127.1`) refused outright; the host resolved and *every* address checked —
loopback, private, link-local (169.254.169.254), unspecified, multicast, reserved, CGNAT and
IPv4 embedded in IPv6 (::ffff:127.0.0.1, 6to4, NAT64) are refused unless the hostname is
listed in `settings.HTTP_ALLOWED_HOSTS` or allowed by the owner in Settings (`nas.lan:8123` allows
only that port; a bare host any).

Credentials do not follow a redirect to another origin: only a short list of harmless request
headers crosses (SAFE_REDIRECT_HEADERS), so a model-set token never reaches a third party.

DNS rebinding: the connection goes to the very address that was checked. The request URL is
rewritten to that IP while the Host header and the TLS SNI / certificate check keep the real
hostname (httpcore's `sni_hostname` extension), so a second, different DNS answer is never
used. Proxies from the environment are ignored (`trust_env=False`) for the same reason.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urljoin

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings

log = logging.getLogger(__name__)
MAX_REDIRECTS = 5
DEFAULT_MAX_BYTES = 5 * 1024 * 1024
_NUMERIC_PART = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_REDIRECT_CODES = {301, 302, 303, 307, 308}
# The only request headers kept when a redirect leaves the origin (scheme, host, port).
SAFE_REDIRECT_HEADERS = {"accept", "accept-language", "user-agent"}


class URLRefused(Exception):
    """The URL may not be fetched; the message says why and what to do."""


class HostUnresolved(URLRefused):
    """The host did not resolve: nothing was refused for its address (yet)."""


@dataclass
class FetchResult:
    url: str  # the final URL after redirects
    status: int
    headers: httpx.Headers
    body: bytes
    truncated: bool = False
    redirects: list[str] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def text(self) -> str:
        charset = _charset(self.headers.get("content-type", "")) or "utf-8"
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def _charset(content_type: str) -> str | None:
    match = re.search(r"charset=[\"']?([\w.:-]+)", content_type, re.IGNORECASE)
    return match.group(1) if match else None


def _split_allowed_entry(entry: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address → (host, port or None)."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        host, port = entry, ""
    return host.rstrip("."), int(port) if port.isdigit() else None


# Hosts the owner allowed in Settings (stored by sessions_app, which registers the reader: this
# module sits below every app). Re-read at most every HOSTS_TTL_S, so every worker sees a change
# within seconds, without a query per request.
HOSTS_TTL_S = 2.0
_hosts_source: Callable[[], list[str]] | None = None
_hosts_cache: tuple[float, list[str]] = (0.0, [])


def register_allowed_hosts(source: Callable[[], list[str]]) -> None:
    global _hosts_source
    _hosts_source = source


def forget_allowed_hosts() -> None:
    """This process changed the list: read it again at the next check."""
    global _hosts_cache
    _hosts_cache = (0.0, [])


def _stale() -> bool:
    return _hosts_source is not None and time.monotonic() - _hosts_cache[0] > HOSTS_TTL_S


def _store(hosts: list[str]) -> None:
    global _hosts_cache
    _hosts_cache = (time.monotonic(), list(hosts))


def _read_failed(exc: Exception) -> None:
    # The database is away (or not open to this caller): the guard keeps working with the
    # environment's list and the last list read; tried again after HOSTS_TTL_S.
    log.warning("netguard: could not read the allowed hosts from the database: %s", exc)
    _store(_hosts_cache[1])


def _read_hosts_and_close() -> list[str]:
    """The list read in a worker thread of its own, whose connection is closed after it."""
    from django.db import connections

    try:
        return _hosts_source()
    finally:
        connections.close_all()  # this thread's only: a pooled connection goes back at once


async def refresh_allowed_hosts() -> None:
    if _stale():
        try:
            # Not thread-sensitive: an event loop in another thread (the MCP hub's) must not
            # queue behind the one thread a sync view holds while it waits for that loop.
            _store(await sync_to_async(_read_hosts_and_close, thread_sensitive=False)())
        except Exception as exc:  # noqa: BLE001 - any failure means "use what we had"
            _read_failed(exc)


def refresh_allowed_hosts_sync() -> None:
    """The sync refresh (blocking code in a thread); on the event loop the cached list is used."""
    try:
        asyncio.get_running_loop()
        return
    except RuntimeError:
        pass
    if _stale():
        try:
            _store(_hosts_source())
        except Exception as exc:  # noqa: BLE001
            _read_failed(exc)


def allowed_entries() -> list[str]:
    return [*settings.HTTP_ALLOWED_HOSTS, *_hosts_cache[1]]


def host_allowed(host: str, port: int | None = None) -> bool:
    """Is this host (and port) explicitly allowed to reach non-public addresses?"""
    wanted = host.lower().rstrip(".")
    for entry in allowed_entries():
        if not entry.strip():
            continue
        allowed_host, allowed_port = _split_allowed_entry(entry)
        if allowed_host == wanted and (allowed_port is None or allowed_port == port):
            return True
    return False


def _looks_numeric(host: str) -> bool:
    parts = host.rstrip(".").split(".")
    return bool(parts) and all(_NUMERIC_PART.match(p) for p in parts)


def ip_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why this address must not be reached (None = a public address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            inner = ip_problem(embedded)
            if inner:
                return f"{inner} (embedded in IPv6 {ip})"
    checks = [
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("unspecified", ip.is_unspecified),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        ("shared (CGNAT)", isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT),
        ("non-global", not ip.is_global),
    ]
    for label, bad in checks:
        if bad:
            return f"{ip} is a {label} address"
    return None


def parse_url(url: str) -> httpx.URL:
    """Parse and check the parts of a URL that need no DNS."""
    if not isinstance(url, str) or not url.strip():
        raise URLRefused("empty URL; give a full http:// or https:// URL")
    if any(c in url for c in "\x00\r\n\t") or "\\" in url.split("?")[0]:
        raise URLRefused("the URL contains control characters or backslashes; give a plain http(s) URL")
    try:
        parsed = httpx.URL(url.strip())
    except Exception as exc:  # httpx.InvalidURL and friends
        raise URLRefused(f"invalid URL ({exc}); give a full http:// or https:// URL with a normal hostname") from None
    if parsed.scheme not in ("http", "https"):
        raise URLRefused(f"scheme '{parsed.scheme or '(none)'}' is not allowed; only http and https URLs can be fetched")
    host = parsed.host
    if not host:
        raise URLRefused("the URL has no host; give a full URL such as https://example.com/page")
    if ":" not in host and _looks_numeric(host):
        try:
            ipaddress.IPv4Address(host.rstrip("."))
        except ValueError:
            raise URLRefused(
                f"numeric host '{host}' is not a canonical dotted IPv4 address (decimal, octal, hex or "
                "shortened forms are refused); use the hostname instead"
            ) from None
    return parsed


async def resolve_checked(url: httpx.URL) -> list[str]:
    """The addresses to connect to for this URL, each one checked (unless the host is allowed)."""
    host = url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    addresses = await _resolve(host, port)
    await refresh_allowed_hosts()
    return check_addresses(host, port, addresses, scheme=url.scheme)


def resolve_checked_sync(host: str, port: int, scheme: str = "http") -> list[str]:
    """resolve_checked for blocking code (a library's own socket connect, in a thread)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise HostUnresolved(f"could not resolve host '{host}' ({exc.strerror}); check the URL") from None
    refresh_allowed_hosts_sync()
    return check_addresses(host, port, _unique_addresses(infos), scheme=scheme)


def never_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why no allow-list opens this address: link-local (the cloud metadata service lives at
    169.254.169.254) or unspecified (0.0.0.0, ::), also embedded in IPv6."""
    problem = ip_problem(ip)
    if problem and ("link-local" in problem or "unspecified" in problem):
        return problem
    return None


def check_addresses(host: str, port: int, addresses: list[str], scheme: str = "http") -> list[str]:
    """`addresses` when every one is public or the host is in HTTP_ALLOWED_HOSTS; else URLRefused.
    An allowed name that resolves to a link-local or unspecified address is refused all the same."""
    if not addresses:
        raise HostUnresolved(f"the host '{host}' did not resolve to any address; check the spelling")
    if host_allowed(host, port):
        for addr in addresses:
            problem = never_problem(ipaddress.ip_address(addr.split("%")[0]))
            if problem:
                raise URLRefused(f"refused to fetch {scheme}://{host}: {problem}, which is never reachable, even for "
                                 "an allowed host (it is where cloud metadata and other machine-local services "
                                 "answer); allow the host by an address it really serves on")
        return addresses
    for addr in addresses:
        problem = ip_problem(ipaddress.ip_address(addr.split("%")[0]))
        if problem:
            raise URLRefused(
                f"refused to fetch {scheme}://{host}: {problem}. Internal addresses are blocked; "
                "the owner can allow this host in Settings → Hosts on your network (or HTTP_ALLOWED_HOSTS)"
            )
    return addresses


async def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise HostUnresolved(f"could not resolve host '{host}' ({exc.strerror}); check the URL") from None
    return _unique_addresses(infos)


def _unique_addresses(infos: list) -> list[str]:
    seen: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        if sockaddr[0] not in seen:
            seen.append(sockaddr[0])
    return seen


def _pinned_request(
    client: httpx.AsyncClient, method: str, url: httpx.URL, ip: str, headers: dict, content: bytes | None
) -> httpx.Request:
    """A request that connects to `ip` but speaks to `url.host` (Host header + SNI)."""
    netloc = url.host if url.port is None else f"{url.host}:{url.port}"
    if ":" in url.host and url.port is None:
        netloc = f"[{url.host}]"
    elif ":" in url.host:
        netloc = f"[{url.host}]:{url.port}"
    headers = {k: v for k, v in headers.items() if k.lower() != "host"}
    headers["Host"] = netloc
    request = client.build_request(method, url.copy_with(host=ip.split("%")[0]), headers=headers, content=content)
    if url.scheme == "https":
        request.extensions["sni_hostname"] = url.host
    return request


async def _send_hop(client, method, url, headers, content, max_bytes) -> tuple[httpx.Response, bytes, bool]:
    """One checked hop: resolve, check, connect to a checked address, read at most max_bytes."""
    addresses = await resolve_checked(url)
    last_error: Exception | None = None
    for ip in addresses:
        request = _pinned_request(client, method, url, ip, headers, content)
        try:
            response = await client.send(request, stream=True)
        except httpx.ConnectError as exc:
            last_error = exc
            continue
        try:
            body, truncated = await _read_capped(response, max_bytes)
        finally:
            await response.aclose()
        return response, body, truncated
    raise httpx.ConnectError(f"could not connect to {url.host}: {last_error}")


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)


def _headers_for_other_origin(headers: dict, keeps_body: bool) -> dict:
    """Only harmless headers follow a redirect to another origin: never Authorization,
    Cookie, Proxy-Authorization or a custom header the model set (an API key, say)."""
    safe = SAFE_REDIRECT_HEADERS | ({"content-type"} if keeps_body else set())
    return {k: v for k, v in headers.items() if k.lower() in safe}


async def fetch(
    url: str,
    method: str = "GET",
    headers: dict | None = None,
    content: bytes | None = None,
    timeout: float = 20.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> FetchResult:
    """Fetch a URL with the guard applied on every redirect hop. Raises URLRefused or httpx errors."""
    current = parse_url(url)
    headers = dict(headers or {})
    redirects: list[str] = []
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            response, body, truncated = await _send_hop(client, method, current, headers, content, max_bytes)
            location = response.headers.get("location")
            if response.status_code not in _REDIRECT_CODES or not location:
                return FetchResult(str(current), response.status_code, response.headers, body, truncated, redirects)
            target = parse_url(urljoin(str(current), location))
            keeps_body = response.status_code in (307, 308)
            if not keeps_body and (response.status_code == 303 or method not in ("GET", "HEAD")):
                method, content = "GET", None
            if _origin(target) != _origin(current):
                headers = _headers_for_other_origin(headers, keeps_body)
                client.cookies.clear()  # cookies the first site set must not reach the next one
            elif content is None:
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            redirects.append(str(target))
            current = target
    raise URLRefused(f"more than {MAX_REDIRECTS} redirects (last: {current}); fetch the final URL directly")
