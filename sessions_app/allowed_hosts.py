"""Hosts on the owner's network that Navi may reach (Settings → Hosts on your network): stored
here, read by navi_project.netguard (registered in SessionsAppConfig.ready), effective within
seconds in every worker. Only a staff account changes the list: it opens the LAN to every
user's tools."""

from __future__ import annotations

import ipaddress
import re

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


def listed() -> list[str]:
    """The stored entries (netguard's source)."""
    return list(AllowedHost.objects.values_list("entry", flat=True))


def normalised(raw: object) -> str:
    """`host`, `host:port`, an IP or `[v6]:port`, lower case; a 400 naming the form otherwise."""
    form = 'a host name or address, optionally with a port: "nas.lan", "192.168.1.20:8123", "[fd00::5]:80"'
    if not isinstance(raw, str) or not raw.strip() or len(raw) > 260:
        raise ApiError(f"host must be {form}", 400)
    entry = raw.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ApiError(f"{raw!r} is not {form}", 400)
        port = rest[1:]
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        host, port = entry, ""
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ApiError(f"{raw!r}: the port must be a number from 1 to 65535", 400)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _NAME.match(host):
            raise ApiError(f"{raw!r} is not a host name: no scheme, path or wildcard; {form}", 400) from None
    host = host.rstrip(".")
    if ":" in host:  # IPv6: in brackets when a port follows
        return f"[{host}]:{int(port)}" if port else host
    return f"{host}:{int(port)}" if port else host


def _staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise ApiError("only the owner (a staff account) can change which hosts on your network Navi may reach", 403)


@api_login_required
@json_view("GET", "POST")
def allowed_hosts(request: HttpRequest) -> JsonResponse:
    """GET: the list (and the HTTP_ALLOWED_HOSTS ones); POST {"host"}: allow one (staff)."""
    if request.method == "POST":
        _staff(request)
        entry = normalised(parse_json_body(request, allow_empty=False).get("host"))
        if AllowedHost.objects.count() >= MAX_HOSTS:
            raise ApiError(f"at most {MAX_HOSTS} hosts; remove one you no longer need first", 400)
        row, made = AllowedHost.objects.get_or_create(entry=entry, defaults={"added_by": request.user})
        netguard.forget_allowed_hosts()
        return JsonResponse({**row.as_dict(), "warning": WARNING.format(entry=entry)}, status=201 if made else 200)
    return JsonResponse({
        "hosts": [h.as_dict() for h in AllowedHost.objects.select_related("added_by")],
        "from_environment": [e for e in settings.HTTP_ALLOWED_HOSTS if e.strip()],
        "can_edit": request.user.is_staff,
    })


@api_login_required
@json_view("DELETE")
def allowed_host_detail(request: HttpRequest, entry: str) -> JsonResponse:
    _staff(request)
    deleted, _ = AllowedHost.objects.filter(entry=entry.strip().lower()).delete()
    if not deleted:
        raise ApiError(f"no allowed host {entry!r}", 404)
    netguard.forget_allowed_hosts()
    return JsonResponse({"ok": True, "entry": entry})
