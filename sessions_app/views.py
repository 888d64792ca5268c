"""REST views for sessions: list, create, detail, pin, context, export/import. Every view requires
login or a Bearer token. The views that start or steer a run are in agent.web.views."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse

from navi_project.http import NESTED_TOO_DEEP, ApiError, json_view, parse_json_body

from . import history, model_choice, search, services, transfer
from .auth import api_login_required
from .models import Message, Session, profile_model
from .signals import send_session_created


def _get_session_for_user(request: HttpRequest, session_id: str) -> Session:
    """The caller's session; someone else's session is a 404, exactly like a missing one."""
    session = Session.objects.owned_by(request.user, session_id).select_related("profile").first()
    if session is None:
        raise ApiError(f"no session '{session_id}'", 404)
    return session


def _messages(session: Session, **flags: bool) -> list[dict]:
    # Context order: a compression summary (at most one in context) comes first, as the model sees it.
    order = ("-is_summary", "seq") if flags.get("in_context") else ("seq",)
    return [m.as_dict() for m in Message.objects.filter(session=session, **flags).order_by(*order)]


PAGE_DEFAULT = 200  # messages in a page of GET /sessions/<id> when no limit is given
PAGE_MAX = 1000


def _page_limit(raw: str | None) -> int:
    if raw is None:
        return PAGE_DEFAULT
    if not raw.isdigit() or not 1 <= int(raw) <= PAGE_MAX:
        raise ApiError(f"limit must be a whole number from 1 to {PAGE_MAX}, not {raw!r}", 400)
    return int(raw)


def _message_page(request: HttpRequest, session: Session) -> dict:
    """The displayed messages, oldest first: the newest `limit`, or the `limit` just before the
    message `before`; `has_more` says whether older ones exist (ask again with
    `before=<older_than>`). A chat within one page reads as it always did: all its messages."""
    limit = _page_limit(request.GET.get("limit"))
    rows = Message.objects.filter(session=session, in_display=True)
    before = request.GET.get("before")
    if before is not None:
        if not before.isdigit():
            raise ApiError(f"before must be the integer id of a message of this chat, not {before!r}", 400)
        seq = Message.objects.filter(session=session, pk=int(before)).values_list("seq", flat=True).first()
        if seq is None:
            raise ApiError(f"no message {before} in this chat; pass the id of one of its messages as before", 400)
        rows = rows.filter(seq__lt=seq)
    page = list(rows.order_by("-seq")[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit][::-1]
    versions = history.versions_of_page(str(session.pk), page)
    return {
        "messages": [_with_versions(m.as_dict(), versions) for m in page],
        "has_more": has_more,
        "older_than": page[0].id if has_more else None,
    }


def _with_versions(row: dict, versions: dict[int, dict]) -> dict:
    if row["id"] in versions:
        row["versions"] = versions[row["id"]]
    return row


@api_login_required
@json_view("POST")
def message_version_select(request: HttpRequest, session_id: str, message_id: str, n: str) -> JsonResponse:
    """Show version `n` of a message (a user message with edits, or an answer regenerated):
    the session detail again, as GET /sessions/<id> answers it."""
    session = _get_session_for_user(request, session_id)
    if not message_id.isdigit():
        raise ApiError(f"no message {message_id!r} in this chat; use the integer id of one of its messages", 404)
    if not n.isdigit():
        raise ApiError(f"the version must be a whole number from 1 (the first version), not {n!r}", 400)
    try:
        history.select_version(str(session.pk), int(message_id), int(n))
    except history.HistoryError as exc:
        raise ApiError(exc.message, exc.status) from None
    return JsonResponse({**session.as_dict(), **_message_page(request, session)})


@api_login_required
@json_view("GET", "POST")
def sessions(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        query = request.GET.get("q", "").strip()
        if query:
            if len(query) > 500:
                raise ApiError("the search query is over 500 characters", 400)
            found = search.search_sessions(request.user, query)
            return JsonResponse({"sessions": [
                {**s.as_dict(), "snippet": snippet, "match_message_id": mid} for s, snippet, mid in found
            ]})
        rows = Session.objects.filter(owner=request.user).select_related("profile").order_by("-pinned", "-last_active")
        return JsonResponse({"sessions": [s.as_dict() for s in rows]})

    data = parse_json_body(request)
    profile = _profile_from(data.get("profile_id"), request.user)
    reuse = data.get("reuse_empty", False)
    if not isinstance(reuse, bool):
        raise ApiError('"reuse_empty" must be true or false', 400)
    if not isinstance(data.get("new", False), bool):  # the old flag: creating is now the default
        raise ApiError('"new" must be true or false', 400)
    # A script that asks for 20 sessions gets 20. Only the page's "New chat" sends reuse_empty:
    # clicked twice, it gives the same empty chat instead of piling them up.
    session = _empty_newest_session(request.user) if reuse else None
    if session is not None:
        if session.profile_id != profile.pk:
            session.profile = profile
            session.save(update_fields=["profile"])
        status = 200
    else:
        session = Session.objects.create(owner=request.user, profile=profile)
        status = 201
    transaction.on_commit(lambda: send_session_created(session))
    return JsonResponse(
        {
            "session_id": str(session.id),
            "profile_id": session.profile_id,
            "created_at": session.created_at.isoformat(),
        },
        status=status,
    )


def _profile_from(profile_id: object, user) -> Any:
    """The requested profile, or the user's default when none is given; 400 when unknown."""
    if profile_id in (None, ""):
        return transfer.default_profile(user)
    if not isinstance(profile_id, str):
        raise ApiError("profile_id must be a string", 400)
    profile = profile_model().objects.filter(pk=profile_id).first()
    if profile is None:
        known = ", ".join(profile_model().objects.values_list("id", flat=True))
        raise ApiError(f"unknown profile '{profile_id}'; known profiles: {known}", 400)
    return profile


def _empty_newest_session(user) -> Session | None:
    newest = Session.objects.filter(owner=user).order_by("-created_at").first()
    if newest is None or newest.active_run_id or Message.objects.filter(session=newest).exists():
        return None
    return newest


@api_login_required
@json_view("GET", "PATCH", "DELETE")
def session_detail(request: HttpRequest, session_id: str) -> JsonResponse:
    session = _get_session_for_user(request, session_id)
    if request.method == "GET":
        if session.unread:  # the owner opened what was written while they were away
            Session.objects.filter(pk=session.pk).update(unread=False)
            session.unread = False
        return JsonResponse({**session.as_dict(), **_message_page(request, session)})
    if request.method == "DELETE":
        services.delete_session(session)
        return JsonResponse({"ok": True, "session_id": str(session_id)})

    data = parse_json_body(request, allow_empty=False)
    unknown = set(data) - {"title", "profile_id", "model"}
    if unknown:
        raise ApiError(f"unknown field(s) {', '.join(sorted(unknown))}; PATCH takes title, profile_id and model", 400)
    if "title" in data:
        title = data["title"]
        if not isinstance(title, str) or len(title) > 200:
            raise ApiError("title must be a string of at most 200 characters", 400)
        session.title = title.strip()
        # A title the owner set is never replaced by a generated one; clearing it lets Navi title again.
        session.title_source = "user" if session.title else ""
    if "profile_id" in data:
        if not isinstance(data["profile_id"], str) or not data["profile_id"]:
            raise ApiError("profile_id must be a profile id string", 400)
        # During a run this takes effect at the run's next model call (or the next turn).
        before = session.profile.llm_backend
        session.profile = _profile_from(data["profile_id"], request.user)
        if session.profile.llm_backend != before:
            session.model = ""  # a model of the other server: the new profile's own is used
    if "model" in data:
        # Checked with the profile's server (during a run it applies from the next turn).
        session.model = model_choice.checked_model(session.profile, data["model"])
    session.save(update_fields=["title", "title_source", "profile", "model"])
    return JsonResponse(session.as_dict())


@api_login_required
@json_view("GET")
def session_export(request: HttpRequest, session_id: str) -> HttpResponse:
    session = _get_session_for_user(request, session_id)
    kind = request.GET.get("format", "md")
    if kind == "json":
        body = json.dumps(transfer.export_json(session), ensure_ascii=False, indent=1)
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
    elif kind in ("md", "markdown"):
        kind = "md"
        response = HttpResponse(transfer.export_markdown(session), content_type="text/markdown; charset=utf-8")
    else:
        raise ApiError(f"unknown export format {kind!r}; use format=md or format=json", 400)
    response["Content-Disposition"] = f'attachment; filename="{transfer.filename(session, kind)}"'
    return response


@api_login_required
@json_view("POST")
def session_import(request: HttpRequest) -> JsonResponse:
    """A JSON export becomes a new chat of the caller (201 with the new session)."""
    limit = settings.SESSION_IMPORT_MAX_MB * 1024 * 1024
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise ApiError(f"the export is larger than {settings.SESSION_IMPORT_MAX_MB} MB (SESSION_IMPORT_MAX_MB)", 413)
    try:
        raw = request.body
    except RequestDataTooBig:
        raise ApiError(f"the export is larger than {settings.SESSION_IMPORT_MAX_MB} MB (SESSION_IMPORT_MAX_MB)", 413) from None
    if len(raw) > limit:
        raise ApiError(f"the export is larger than {settings.SESSION_IMPORT_MAX_MB} MB (SESSION_IMPORT_MAX_MB)", 413)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(f"request body is not valid JSON: {exc}", 400) from None
    except RecursionError:
        raise ApiError(NESTED_TOO_DEEP, 400) from None
    del raw  # the parsed export is all that is needed from here on
    try:
        session = transfer.import_json(request.user, data)
    except transfer.ImportError_ as exc:
        raise ApiError(f"cannot import: {exc}", 400) from None
    session = Session.objects.select_related("profile").get(pk=session.pk)
    return JsonResponse({**session.as_dict(), "message_count": session.messages.count()}, status=201)


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
