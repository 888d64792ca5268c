"""JSON endpoints of the memory page: the signed-in user's facts and summary, add, edit, forget.

Every change rebuilds the summary (services.refresh_summary): it is injected into every run,
so a fact the owner corrected or deleted must leave it at once.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from navi_project.http import ApiError, json_view, parse_json_body
from sessions_app.auth import api_login_required

from . import services
from .models import CATEGORY_MAX, KEY_MAX, VALUE_MAX, MemoryFact, MemorySummary


def _fact_json(f: MemoryFact) -> dict:
    return {
        "id": f.id,
        "category": f.category,
        "key": f.key,
        "value": f.value,
        "source_session": str(f.source_session_id) if f.source_session_id else None,
        # Saved by the agent while its chat held outside content, not yet confirmed by the owner.
        "untrusted": bool(f.untrusted_source),
        "untrusted_source": f.untrusted_source,
        "created_at": f.created_at.isoformat(),
        "updated_at": f.updated_at.isoformat(),
    }


def _get_fact_for_user(request: HttpRequest, fact_id: str) -> MemoryFact:
    """The caller's fact; another user's fact is a 404, exactly like a missing one."""
    if not str(fact_id).isdigit():
        raise ApiError(f"no memory fact '{fact_id}' (fact ids are integers)", 404)
    fact = MemoryFact.objects.filter(pk=int(fact_id), owner=request.user).first()
    if fact is None:
        raise ApiError(f"no memory fact '{fact_id}'", 404)
    return fact


MAX_FACTS_PER_USER = 2000  # the page lists them all; the summary prompt takes the newest 400


def _summary_json(owner_id: int) -> dict:
    """The summary and when it changed: the page shows both after every change."""
    summary = MemorySummary.objects.filter(owner_id=owner_id).first()
    return {
        "summary": summary.content if summary else "",
        "summary_updated_at": summary.updated_at.isoformat() if summary else None,
    }


@api_login_required
@json_view("GET", "POST")
def memory(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return _add_fact(request)
    return JsonResponse({"facts": [_fact_json(f) for f in services.all_facts(request.user.pk)], **_summary_json(request.user.pk)})


def _add_fact(request: HttpRequest) -> JsonResponse:
    """POST /memory {category, key, value}: a fact the owner tells Navi directly. An existing
    (category, key) is a 409, not an overwrite: the page edits that one instead."""
    data = parse_json_body(request, allow_empty=False)
    unknown = set(data) - {"category", "key", "value"}
    missing = [name for name in ("category", "key", "value") if name not in data]
    if unknown or missing:
        raise ApiError("send category, key and value (all three, nothing else)", 400)
    category, key, value = _label(data, "category", CATEGORY_MAX), _label(data, "key", KEY_MAX), _value(data)
    owner_id = request.user.pk
    if MemoryFact.objects.filter(owner_id=owner_id, category=category, key=key).exists():
        raise ApiError(f"you already have a fact '{category}: {key}'; edit or delete that one", 409)
    if MemoryFact.objects.filter(owner_id=owner_id).count() >= MAX_FACTS_PER_USER:
        raise ApiError(f"you already have {MAX_FACTS_PER_USER} facts; forget some first", 400)
    try:
        with transaction.atomic():
            fact = MemoryFact.objects.create(owner_id=owner_id, category=category, key=key, value=value)
    except IntegrityError:  # the same fact added at the same moment elsewhere
        raise ApiError(f"you already have a fact '{category}: {key}'; edit or delete that one", 409) from None
    services.refresh_summary(owner_id)
    return JsonResponse({"fact": _fact_json(fact), **_summary_json(owner_id)}, status=201)


def _value(data: dict) -> str:
    value = data["value"]
    if not isinstance(value, str) or not value.strip():
        raise ApiError("value must be non-empty text", 400)
    if len(value) > VALUE_MAX:
        raise ApiError(f"value is limited to {VALUE_MAX} characters", 400)
    return " ".join(value.split())


def _label(data: dict, name: str, limit: int) -> str:
    value = data[name]
    if not isinstance(value, str) or not services.normalise_label(value):
        raise ApiError(f"{name} must be non-empty text", 400)
    value = services.normalise_label(value)
    if len(value) > limit:
        raise ApiError(f"{name} is limited to {limit} characters", 400)
    return value


@api_login_required
@json_view("PATCH", "DELETE")
def memory_fact(request: HttpRequest, fact_id: str) -> JsonResponse:
    fact = _get_fact_for_user(request, fact_id)
    if request.method == "DELETE":
        fact.delete()
        services.refresh_summary(request.user.pk)
        return JsonResponse({"ok": True, "id": int(fact_id), **_summary_json(request.user.pk)})

    data = parse_json_body(request, allow_empty=False)
    unknown = set(data) - {"category", "key", "value"}
    if unknown:
        raise ApiError(f"unknown field(s) {', '.join(sorted(unknown))}; send category, key and/or value", 400)
    if "category" in data:
        fact.category = _label(data, "category", CATEGORY_MAX)
    if "key" in data:
        fact.key = _label(data, "key", KEY_MAX)
    if "value" in data:
        fact.value = _value(data)
        fact.untrusted_source = ""  # the owner's own words now
    fact.updated_at = timezone.now()
    try:
        with transaction.atomic():
            fact.save(update_fields=["category", "key", "value", "untrusted_source", "updated_at"])
    except IntegrityError:
        raise ApiError(f"you already have a fact '{fact.category}: {fact.key}'; edit or delete that one", 409) from None
    services.refresh_summary(request.user.pk)
    return JsonResponse({"fact": _fact_json(fact), **_summary_json(request.user.pk)})


@api_login_required
@json_view("POST")
def confirm_fact(request: HttpRequest, fact_id: str) -> JsonResponse:
    """POST /memory/facts/<id>/confirm: the owner vouches for a fact the agent saved after reading
    outside content; the prompt then lists it with the others."""
    fact = _get_fact_for_user(request, fact_id)
    services.confirm_fact(fact)
    return JsonResponse({"fact": _fact_json(fact), **_summary_json(request.user.pk)})
