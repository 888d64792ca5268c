"""REST for notification targets (DESIGN §9): GET/POST /settings/notify, DELETE
/settings/notify/<id>, POST /settings/notify/<id>/test. Secrets never leave: targets are shown
with a redacted address only."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.http import HttpRequest, JsonResponse

from navi_project.http import ApiError, json_view, parse_json_body
from sessions_app.auth import api_login_required

from .delivery import deliver
from .models import NotifyTarget
from .senders import SENDERS, BadTarget, Notification, get_sender
from .vapid import public_key

MAX_TARGETS = 50
TEST_NOTE = Notification(title="Navi test notification", body="Notifications reach this target.", url="/",
                         tag="navi-test")


def _own_target(request: HttpRequest, target_id: str) -> NotifyTarget:
    """The caller's target: another user's id is as unknown as a missing one (404)."""
    target = NotifyTarget.objects.filter(pk=int(target_id), owner=request.user).first() if target_id.isdigit() else None
    if target is None:
        raise ApiError(f"no notification target '{target_id}'; GET /settings/notify lists yours", 404)
    return target


def _create(request: HttpRequest) -> JsonResponse:
    data = parse_json_body(request, allow_empty=False)
    kind = data.get("kind")
    sender = get_sender(kind) if isinstance(kind, str) else None
    if sender is None:
        raise ApiError(f"'kind' must be one of {', '.join(sorted(SENDERS))}", 400)
    label = data.get("label", "")
    if not isinstance(label, str) or len(label.strip()) > 100:
        raise ApiError("label must be text of at most 100 characters", 400)
    unknown = set(data) - {"kind", "label", "subscription", "url"}
    if unknown:
        raise ApiError(f"unknown field(s) {', '.join(sorted(unknown))}; send kind, label and subscription or url", 400)
    try:
        fields = sender.clean(data)
    except BadTarget as exc:
        raise ApiError(str(exc), 400) from None
    mine = NotifyTarget.objects.filter(owner=request.user)
    endpoint = fields.get("subscription", {}).get("endpoint")
    if endpoint and (same := mine.filter(kind=kind, subscription__endpoint=endpoint).first()):
        # The same browser subscribing again (new keys after a reset): one target, updated.
        same.subscription, same.label = fields["subscription"], label.strip() or same.label
        same.save(update_fields=["subscription", "label"])
        return JsonResponse(same.as_dict(), status=200)
    if mine.count() >= MAX_TARGETS:
        raise ApiError(f"you already have {MAX_TARGETS} notification targets; remove some first", 400)
    target = NotifyTarget.objects.create(owner=request.user, kind=kind, label=label.strip(), **fields)
    return JsonResponse(target.as_dict(), status=201)


@api_login_required
@json_view("GET", "POST")
def targets(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        return _create(request)
    mine = NotifyTarget.objects.filter(owner=request.user)
    return JsonResponse({"vapid_public_key": public_key(), "targets": [t.as_dict() for t in mine]})


@api_login_required
@json_view("DELETE")
def target_detail(request: HttpRequest, target_id: str) -> JsonResponse:
    target = _own_target(request, target_id)
    target.delete()
    return JsonResponse({"ok": True, "id": int(target_id)})


@api_login_required
@json_view("POST")
def target_test(request: HttpRequest, target_id: str) -> JsonResponse:
    """Send a test notification now and answer with its outcome (a failure is 200 {ok: false})."""
    target = _own_target(request, target_id)
    outcome = async_to_sync(deliver)(target, TEST_NOTE)
    removed = not NotifyTarget.objects.filter(pk=target.pk).exists()
    return JsonResponse({**outcome, "removed": removed})
