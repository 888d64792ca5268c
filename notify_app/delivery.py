"""notify_user: one notification to every target of a user, at once, each bounded in time.

Outcomes are recorded on the targets (last_ok_at / last_error); a subscription the push service
says is gone is deleted. A failed delivery never raises: the caller (a routine, the agent) gets
`[{"target_id", "kind", "ok", "error"}]` and carries on.
"""

from __future__ import annotations

import asyncio
import logging
import time

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone

from .models import NotifyTarget
from .senders import DeliveryFailed, Notification, get_sender

logger = logging.getLogger(__name__)
MAX_TITLE = 120
MAX_BODY = 1000
HAS_TARGETS_TTL_S = 60.0
_has_targets: dict[int, tuple[bool, float]] = {}  # user id → (answer, monotonic expiry)


async def notify_user(user_id: int, *, title: str, body: str, url: str, tag: str = "") -> list[dict]:
    """Send to every target of `user_id` concurrently; one outcome per target (none: [])."""
    note = Notification(title=title[:MAX_TITLE], body=body[:MAX_BODY], url=url, tag=tag)
    targets = [t async for t in NotifyTarget.objects.filter(owner_id=user_id)]
    return list(await asyncio.gather(*(deliver(t, note) for t in targets)))


def notify_user_sync(user_id: int, *, title: str, body: str, url: str, tag: str = "") -> list[dict]:
    """notify_user for sync code (a management command, a sync view)."""
    return async_to_sync(notify_user)(user_id, title=title, body=body, url=url, tag=tag)


async def deliver(target: NotifyTarget, note: Notification) -> dict:
    """One target: send within NOTIFY_TIMEOUT_S, record the outcome, return it."""
    timeout = settings.NOTIFY_TIMEOUT_S
    sender = get_sender(target.kind)
    expired = False
    try:
        if sender is None:
            raise DeliveryFailed(f"no sender for '{target.kind}' targets is installed; remove this target")
        await asyncio.wait_for(sender.send(target, note), timeout)
        error = ""
    except DeliveryFailed as exc:
        error, expired = exc.message, exc.expired
    except TimeoutError:
        error = f"no answer within {timeout:g} s; check that the service is reachable, then send a test"
    except Exception:
        logger.exception("notification to target %s (%s) failed", target.pk, target.kind)
        error = "an unexpected error stopped this delivery; the server log has the details"
    await _record(target, error, expired)
    return {"target_id": target.pk, "kind": target.kind, "ok": not error, "error": error}


async def _record(target: NotifyTarget, error: str, expired: bool) -> None:
    now = timezone.now()
    if expired:
        await NotifyTarget.objects.filter(pk=target.pk).adelete()
        forget_has_targets(target.owner_id)
    elif error:
        target.last_error, target.last_error_at = error, now
        await NotifyTarget.objects.filter(pk=target.pk).aupdate(last_error=error, last_error_at=now)
    else:
        target.last_ok_at = now
        await NotifyTarget.objects.filter(pk=target.pk).aupdate(last_ok_at=now)


async def has_targets(user_id: int) -> bool:
    """Does this user have any target? Cached a minute per process: the agent asks at every run's end."""
    cached = _has_targets.get(user_id)
    if cached and cached[1] > time.monotonic():
        return cached[0]
    answer = await NotifyTarget.objects.filter(owner_id=user_id).aexists()
    _has_targets[user_id] = (answer, time.monotonic() + HAS_TARGETS_TTL_S)
    return answer


def forget_has_targets(user_id: int) -> None:
    """A target was added or removed in this process: ask the database next time."""
    _has_targets.pop(user_id, None)
