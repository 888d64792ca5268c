"""Hosts on the owner's network that Navi may reach (Settings → Hosts on your network): stored
here, read by navi_project.netguard (registered in SessionsAppConfig.ready), effective within
seconds in every worker. Only a staff account changes the list: it opens the LAN to every
user's tools."""

from __future__ import annotations

import ipaddress
import re
import socket

from django.conf import settings
from django.http import HttpRequest, JsonResponse

from navi_project import netguard
from navi_project.http import ApiError, json_view, parse_json_body

from .auth import api_login_required
from .models import AllowedHost

MAX_HOSTS = 100
_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*\.?$")
WARNING = (
    "Navi's web tools, notification targets and MCP servers may now reach {entry} although it is on your own "
    "network; a page or a message that steers the model can make requests to it too. Allow only devices you trust."
)


_NUMERIC = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*$")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Cloud instance-metadata endpoints outside link-local (which covers 169.254.169.254, AWS
# ECS's 169.254.170.2 and the rest): AWS's IPv6 one, Alibaba's and Oracle's; and their names.
METADATA_ADDRESSES = {ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200", "192.0.0.192")}
METADATA_NAMES = {"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                  "instance-data.ec2.internal"}
LINK_LOCAL = ("{shown} is a link-local address (169.254.0.0/16, fe80::/10): no device of yours is reached there "
              "on purpose, but clouds serve their instance metadata and credentials at 169.254.169.254, so it is "
              "never allowed. Allow the device by its own address on your network (e.g. 192.168.1.20) or its name")
UNSPECIFIED = ("{shown} is the unspecified address (0.0.0.0, ::): it means \"this machine, every interface\", so it "
               "would open every service on the Navi server. It is never allowed; for a service on this machine "
               "allow 127.0.0.1:<port> (or localhost:<port>) with its port")
METADATA = ("{shown} is a cloud's instance-metadata endpoint (it hands out the server's credentials), so it is never "
            "allowed. Allow the device by its own address on your network (e.g. 192.168.1.20) or its name")
LOOPBACK_WARNING = (" {entry} is the Navi server itself: its other services (databases, admin pages) become reachable "
                    "too, unless you allowed only one port.")


def listed() -> list[str]:
    """The stored entries (netguard's source), less any never allowed (a row stored before
    link-local and unspecified addresses were refused: it stays listed, to be removed, but
    opens nothing)."""
    return [entry for entry in AllowedHost.objects.values_list("entry", flat=True) if not never_allowed(entry)]


def _split(entry: str) -> tuple[str, str]:
    """(host, port) of a lower-case `host`, `host:port`, `[v6]`, `[v6]:port` or bare IPv6."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(entry)
        return host, rest[1:]
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, port
    return entry, ""


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `host` denotes: a canonical IP, or a numeric spelling a resolver reads as one
    (0xa9fea9fe, 2852039166, 0251.0376.0251.0376, 169.254.43518, 0); None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC.match(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _why_never(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, shown: str) -> str:
    """Why this address may never be allowed ("" if it may), looking inside IPv6 forms that
    carry an IPv4 address (::ffff:169.254.169.254 reaches 169.254.169.254)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(str(ip).split("%")[0])
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is None and ip in _NAT64:
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None and (why := _why_never(inner, f"{shown} (that is {inner})")):
            return why
    if ip.is_link_local:
        return LINK_LOCAL.format(shown=shown)
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
        return UNSPECIFIED.format(shown=shown)
    if ip in METADATA_ADDRESSES:
        return METADATA.format(shown=shown)
    return ""


def never_allowed(entry: str) -> str:
    """Why `entry` (any spelling) may never be allowed, or ""."""
    try:
        host, _ = _split(entry.strip().lower())
    except ValueError:
        return ""
    host = host.rstrip(".")
    if host in METADATA_NAMES:
        return METADATA.format(shown=host)
    ip = _address(host)
    if ip is None:
        return ""
    shown = host if str(ip) == host else f"{host} (that is {ip})"
    return _why_never(ip, shown)


def normalised(raw: object) -> str:
    """`host`, `host:port`, an IP or `[v6]:port`, lower case; a 400 naming the form otherwise."""
    form = 'a host name or address, optionally with a port: "nas.lan", "192.168.1.20:8123", "[fd00::5]:80"'
    if not isinstance(raw, str) or not raw.strip() or len(raw) > 260:
        raise ApiError(f"host must be {form}", 400)
    entry = raw.strip().lower()
    try:
        host, port = _split(entry)
    except ValueError:
        raise ApiError(f"{raw!r} is not {form}", 400) from None
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ApiError(f"{raw!r}: the port must be a number from 1 to 65535", 400)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _NAME.match(host):
            raise ApiError(f"{raw!r} is not a host name: no scheme, path or wildcard; {form}", 400) from None
        if _NUMERIC.match(host.rstrip(".")):  # a number, not a name: URLs spelling an address so are refused
            ip = _address(host.rstrip("."))
            if ip is None:
                raise ApiError(f"{raw!r} is neither a name nor an address; {form}", 400) from None
            if str(ip) != host.rstrip("."):  # "192.168.1.20." is that address; 3232235796 only spells it
                raise ApiError(f"{raw!r} spells the address {ip} in a form URLs may not use; write it as {ip}", 400) from None
    host = host.rstrip(".")
    if ":" in host:  # IPv6: in brackets when a port follows
        return f"[{host}]:{int(port)}" if port else host
    return f"{host}:{int(port)}" if port else host


def _refuse_never_allowed(raw: str, entry: str) -> None:
    why = never_allowed(entry) or never_allowed(raw.strip().lower())
    if why:
        raise ApiError(f"refused {raw.strip()!r}: {why}.", 400)


def _same(entry: str) -> tuple[str, int | None] | None:
    """What an entry means, whatever its spelling: (host, port) with an IP written canonically
    ("[0:0::1]", "::1" and "[::1]" are one), for finding a stored row to remove."""
    try:
        host, port = _split(entry.strip().lower())
    except ValueError:
        return None
    host = host.rstrip(".")
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        pass
    return host, int(port) if port.isdigit() else None


def _staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise ApiError("only the owner (a staff account) can change which hosts on your network Navi may reach", 403)


@api_login_required
@json_view("GET", "POST")
def allowed_hosts(request: HttpRequest) -> JsonResponse:
    """GET: the list (and the HTTP_ALLOWED_HOSTS ones); POST {"host"}: allow one (staff)."""
    if request.method == "POST":
        _staff(request)
        raw = parse_json_body(request, allow_empty=False).get("host")
        if isinstance(raw, str):
            _refuse_never_allowed(raw, raw)  # before the form check: 0xa9fea9fe is refused for what it is
        entry = normalised(raw)
        _refuse_never_allowed(raw, entry)
        if AllowedHost.objects.count() >= MAX_HOSTS:
            raise ApiError(f"at most {MAX_HOSTS} hosts; remove one you no longer need first", 400)
        row, made = AllowedHost.objects.get_or_create(entry=entry, defaults={"added_by": request.user})
        netguard.forget_allowed_hosts()
        return JsonResponse({**row.as_dict(), "warning": _warning(entry)}, status=201 if made else 200)
    return JsonResponse({
        "hosts": [_shown(h) for h in AllowedHost.objects.select_related("added_by")],
        "from_environment": [e for e in settings.HTTP_ALLOWED_HOSTS if e.strip()],
        "can_edit": request.user.is_staff,
    })


@api_login_required
@json_view("DELETE")
def allowed_host_detail(request: HttpRequest, entry: str) -> JsonResponse:
    """Remove an entry given in any spelling it could be added in ("[::1]" removes "::1")."""
    _staff(request)
    wanted = {entry.strip().lower()}
    try:
        wanted.add(normalised(entry))
    except ApiError:
        pass  # not a form one can add: only an exact match of a stored row
    meaning = _same(entry)
    ids = [row.pk for row in AllowedHost.objects.all()
           if row.entry in wanted or (meaning is not None and _same(row.entry) == meaning)]
    deleted, _ = AllowedHost.objects.filter(pk__in=ids).delete()
    if not deleted:
        raise ApiError(f"no allowed host {entry!r}; GET /settings/allowed-hosts lists the entries as stored", 404)
    netguard.forget_allowed_hosts()
    return JsonResponse({"ok": True, "entry": entry})


def _loopback(entry: str) -> bool:
    host = (_same(entry) or ("", None))[0]
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _warning(entry: str) -> str:
    return WARNING.format(entry=entry) + (LOOPBACK_WARNING.format(entry=entry) if _loopback(entry) else "")


def _shown(row: AllowedHost) -> dict:
    """A row as listed; one never allowed (stored before that was refused) says it opens nothing."""
    shown = row.as_dict()
    if why := never_allowed(row.entry):
        shown["ignored"] = f"not in effect: {why}. Remove it."
    return shown
