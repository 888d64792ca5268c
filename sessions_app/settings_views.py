"""The user's settings (theme, default profile, notifications) and API tokens.

A token's raw value is shown once, in the response that creates it; only its hash is kept.
"""

from __future__ import annotations

from typing import Any, Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from navi_project.http import ApiError, json_view, parse_json_body

from . import connections
from .auth import api_login_required
from .models import ApiToken, UserSettings, profile_model

MAX_TOKENS = 50
# Parts of GET /settings that apps above this one fill in from their AppConfig.ready (e.g.
# messaging_app's "telegram"): name -> function of the user returning a JSON-able value.
SETTINGS_EXTRAS: dict[str, Callable[[Any], Any]] = {}


def register_settings_extra(name: str, describe: Callable[[Any], Any]) -> None:
    SETTINGS_EXTRAS[name] = describe


def _as_json(prefs: UserSettings) -> dict:
    return {**prefs.as_dict(), **connections.describe(prefs.user),
            **{name: describe(prefs.user) for name, describe in SETTINGS_EXTRAS.items()}}


def _settings_for(user) -> UserSettings:
    return UserSettings.objects.get_or_create(user=user)[0]


@api_login_required
@json_view("GET", "PATCH")
def user_settings(request: HttpRequest) -> JsonResponse:
    prefs = _settings_for(request.user)
    if request.method == "GET":
        return JsonResponse(_as_json(prefs))
    data = parse_json_body(request, allow_empty=False)
    known = {"theme", "default_profile", "notify_when_done", "time_zone", *connections.KEYS}
    unknown = set(data) - known
    if unknown:
        raise ApiError(f"unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}", 400)
    if "theme" in data:
        if data["theme"] not in UserSettings.Theme.values:
            raise ApiError(f"theme must be one of {', '.join(UserSettings.Theme.values)}", 400)
        prefs.theme = data["theme"]
    if "default_profile" in data:
        pid = data["default_profile"]
        if pid is None or pid == "":
            prefs.default_profile = None
        elif not isinstance(pid, str) or (profile := profile_model().objects.filter(pk=pid).first()) is None:
            raise ApiError(f"unknown profile {pid!r}; see GET /agents/profiles", 400)
        else:
            prefs.default_profile = profile
    if "notify_when_done" in data:
        if not isinstance(data["notify_when_done"], bool):
            raise ApiError("notify_when_done must be true or false", 400)
        prefs.notify_when_done = data["notify_when_done"]
    if "time_zone" in data:
        prefs.time_zone = valid_time_zone(data["time_zone"])
    connections.change(request.user, data)  # the owner's (staff): connections and default models
    prefs.updated_at = timezone.now()
    prefs.save()
    return JsonResponse(_as_json(prefs))


def valid_time_zone(name: object) -> str:
    """An IANA zone name as given ("" = the server's), or ApiError naming the problem."""
    if name in (None, ""):
        return ""
    hint = "give an IANA time zone such as Europe/Paris or America/New_York, or \"\" for the server's"
    if not isinstance(name, str):
        raise ApiError(f"time_zone must be text; {hint}", 400)
    if len(name) > 64:
        raise ApiError(f"time_zone is {len(name)} characters, longer than any zone name; {hint}", 400)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):  # OSError: "Europe" is a folder of zones
        raise ApiError(f"unknown time zone {name!r}; {hint}", 400) from None
    return name


def _token_json(t: ApiToken) -> dict:
    return {
        "id": t.id,
        "name": t.name,
        "prefix": t.prefix,
        "created_at": t.created_at.isoformat(),
        "last_used": t.last_used.isoformat() if t.last_used else None,
    }


@api_login_required
@json_view("GET", "POST")
def tokens(request: HttpRequest) -> JsonResponse:
    mine = ApiToken.objects.filter(user=request.user).order_by("-created_at")
    if request.method == "GET":
        return JsonResponse({"tokens": [_token_json(t) for t in mine]})
    data = parse_json_body(request)
    name = data.get("name", "")
    if not isinstance(name, str) or len(name.strip()) > 100:
        raise ApiError("name must be text of at most 100 characters", 400)
    if mine.count() >= MAX_TOKENS:
        raise ApiError(f"you already have {MAX_TOKENS} tokens; revoke some first", 400)
    token, raw = ApiToken.issue(request.user, name=name.strip())
    # The only time the raw token is ever shown.
    return JsonResponse({**_token_json(token), "token": raw}, status=201)


@api_login_required
@json_view("DELETE")
def token_detail(request: HttpRequest, token_id: str) -> JsonResponse:
    if not str(token_id).isdigit():
        raise ApiError(f"no token '{token_id}' (token ids are integers)", 404)
    deleted, _ = ApiToken.objects.filter(pk=int(token_id), user=request.user).delete()
    if not deleted:
        raise ApiError(f"no token '{token_id}'", 404)
    return JsonResponse({"ok": True, "id": int(token_id)})
