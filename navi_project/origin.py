"""Which Origins may open a WebSocket: this server's own origin and CSRF_TRUSTED_ORIGINS,
compared as full origins (scheme, host and port), as Django's CSRF check does for forms.

The server's own origin comes from the handshake's Host header, which must itself be in
ALLOWED_HOSTS; its scheme is https for wss:// or when SECURE_PROXY_SSL_HEADER says so.
Comparing host names only would let any other port on the same machine (another web app,
a dev server, a page an attacker got onto the LAN box) drive the owner's socket.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

Origin = tuple[str, str, int]  # scheme, host, port (default ports filled in)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def parse_origin(value: str) -> Origin | None:
    """(scheme, host, port) of an http(s) origin, or None for anything else ('null', junk)."""
    try:
        parts = urlsplit(value.strip())
        scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    except ValueError:
        return None
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    return scheme, host.rstrip("."), port or _DEFAULT_PORTS[scheme]


def _is_secure(scope: dict) -> bool:
    if scope.get("scheme") in ("wss", "https"):
        return True
    if not settings.SECURE_PROXY_SSL_HEADER:
        return False
    meta_name, secure_value = settings.SECURE_PROXY_SSL_HEADER
    forwarded = header(scope, meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode())
    return forwarded is not None and forwarded.split(",", 1)[0].strip() == secure_value


def server_origin(scope: dict) -> Origin | None:
    """The origin the client reached us at, if its Host header names one of ALLOWED_HOSTS."""
    host = header(scope, b"host")
    if not host:
        return None
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:  # the same fallback as Django's request.get_host()
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    if not domain or not validate_host(domain, allowed):
        return None
    return parse_origin(f"{'https' if _is_secure(scope) else 'http'}://{host}")


def _trusted(origin: Origin, raw_origin: str) -> bool:
    """Is the origin listed in CSRF_TRUSTED_ORIGINS (`https://*.example.com` wildcards too)?"""
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        if "*" in entry:  # Django's rule: same scheme, netloc matches the pattern
            pattern = urlsplit(entry)
            if pattern.scheme == origin[0] and is_same_domain(urlsplit(raw_origin).netloc.lower(), pattern.netloc.lstrip("*")):
                return True
        elif parse_origin(entry) == origin:
            return True
    return False


def origin_allowed(scope: dict, raw_origin: str) -> bool:
    origin = parse_origin(raw_origin)
    if origin is None:
        return False
    return origin == server_origin(scope) or _trusted(origin, raw_origin)
