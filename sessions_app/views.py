"""REST views for sessions (DESIGN §4). Every view requires login or a Bearer token."""

from __future__ import annotations

import uuid

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from agent.models import Profile
from navi_project.http import ApiError, json_view, parse_json_body

from . import services
from .auth import api_login_required
from .models import Message, Session


def _get_session_for_user(request: HttpRequest, session_id: str) -> Session:
    """The caller's session; someone else's session is a 404, exactly like a missing one."""
    try:
        uid = uuid.UUID(str(session_id))
    except ValueError:
        raise ApiError(f"no session '{session_id}' (session ids are UUIDs)", 404) from None
    session = Session.objects.filter(pk=uid, owner=request.user).first()
    if session is None:
        raise ApiError(f"no session '{session_id}'", 404)
    return session


def _messages(session: Session, **flags: bool) -> list[dict]:
    # Context order: a compression summary (at most one in context) comes first, as the model sees it.
    order = ("-is_summary", "seq") if flags.get("in_context") else ("seq",)
    return [m.as_dict() for m in Message.objects.filter(session=session, **flags).order_by(*order)]


@api_login_required
@json_view("GET", "POST")
def sessions(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        rows = Session.objects.filter(owner=request.user).order_by("-pinned", "-last_active")
        return JsonResponse({"sessions": [s.as_dict() for s in rows]})

    data = parse_json_body(request)
    profile_id = data.get("profile_id") or "secretary"
    if not isinstance(profile_id, str):
        raise ApiError("profile_id must be a string", 400)
    profile = Profile.objects.filter(pk=profile_id).first()
    if profile is None:
        known = ", ".join(Profile.objects.values_list("id", flat=True))
        raise ApiError(f"unknown profile '{profile_id}'; known profiles: {known}", 400)
    session = Session.objects.create(owner=request.user, profile=profile)
    transaction.on_commit(lambda: services.session_created(session))
    return JsonResponse(
        {
            "session_id": str(session.id),
            "profile_id": session.profile_id,
            "created_at": session.created_at.isoformat(),
        },
        status=201,
    )


@api_login_required
@json_view("GET", "PATCH", "DELETE")
def session_detail(request: HttpRequest, session_id: str) -> JsonResponse:
    session = _get_session_for_user(request, session_id)
    if request.method == "GET":
        return JsonResponse({**session.as_dict(), "messages": _messages(session, in_display=True)})
    if request.method == "DELETE":
        services.delete_session(session)
        return JsonResponse({"ok": True, "session_id": str(session_id)})

    data = parse_json_body(request, allow_empty=False)
    if "title" in data:
        title = data["title"]
        if not isinstance(title, str) or len(title) > 200:
            raise ApiError("title must be a string of at most 200 characters", 400)
        session.title = title.strip()
    if "profile_id" in data:
        profile = Profile.objects.filter(pk=str(data["profile_id"])).first()
        if profile is None:
            raise ApiError(f"unknown profile '{data['profile_id']}'", 400)
        session.profile = profile
    session.save(update_fields=["title", "profile"])
    return JsonResponse(session.as_dict())


@api_login_required
@json_view("PATCH", "POST")
def session_pin(request: HttpRequest, session_id: str) -> JsonResponse:
    session = _get_session_for_user(request, session_id)
    data = parse_json_body(request, allow_empty=False)
    pinned = data.get("pinned")
    if not isinstance(pinned, bool):
        raise ApiError('body must be {"pinned": true} or {"pinned": false}', 400)
    session.pinned = pinned
    session.save(update_fields=["pinned"])
    return JsonResponse({"ok": True, "session_id": str(session.id), "pinned": pinned})


@api_login_required
@json_view("GET")
def session_context(request: HttpRequest, session_id: str) -> JsonResponse:
    session = _get_session_for_user(request, session_id)
    return JsonResponse(
        {
            "session_id": str(session.id),
            "profile_id": session.profile_id,
            "context_token_count": session.context_token_count,
            "messages": _messages(session, in_context=True),
        }
    )
