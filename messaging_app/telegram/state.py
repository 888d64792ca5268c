"""The bot's shared state in the database: the poll lease, the update offset and the last error.

Every worker reads the same row, so exactly one polls (the lease holder), another takes over
once the holder stops renewing, and the offset survives restarts: an update is neither lost
nor handled twice.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from messaging_app.models import BotState

log = logging.getLogger(__name__)
NAME = "telegram"


def state() -> BotState:
    return BotState.objects.get_or_create(name=NAME)[0]


def take_lease(holder: str, lease_s: float) -> bool:
    """Take or renew the poll lease; False while another live worker holds it."""
    state()
    now = timezone.now()
    free = Q(lease_holder=holder) | Q(lease_holder="") | Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    taken = BotState.objects.filter(Q(name=NAME) & free).update(
        lease_holder=holder, lease_expires_at=now + timedelta(seconds=lease_s)
    )
    return taken == 1


def release_lease(holder: str) -> None:
    """On a clean shutdown: another worker may take over at once instead of after expiry."""
    BotState.objects.filter(name=NAME, lease_holder=holder).update(lease_holder="", lease_expires_at=None)


def offset() -> int:
    return state().update_offset


def store_offset(holder: str, next_offset: int, lease_s: float) -> bool:
    """Record that every update below `next_offset` is handled (renewing the lease too); False
    when this worker lost the lease meanwhile, so it stops before handling anything twice."""
    return BotState.objects.filter(name=NAME, lease_holder=holder, update_offset__lt=next_offset).update(
        update_offset=next_offset, lease_expires_at=timezone.now() + timedelta(seconds=lease_s)
    ) == 1 or BotState.objects.filter(name=NAME, lease_holder=holder, update_offset__gte=next_offset).exists()


def claim_update(update_id: int) -> bool:
    """Webhook mode: the first worker to see an update handles it (a redelivery is skipped)."""
    state()
    return BotState.objects.filter(name=NAME, update_offset__lte=update_id).update(update_offset=update_id + 1) == 1


def record_ok(bot_username: str = "") -> None:
    changes = {"last_error": "", "last_ok_at": timezone.now()}
    if bot_username:
        changes["bot_username"] = bot_username
    BotState.objects.filter(name=NAME).update(**changes)


def record_error(message: str) -> bool:
    """Store the problem for /health and /settings; True when it is new (log it once, not per retry)."""
    row = state()
    BotState.objects.filter(name=NAME).update(last_error=message[:1000], last_error_at=timezone.now())
    return row.last_error != message[:1000]
