"""The channel's state as the owner sees it (/settings, /health): configured, the bot's name,
the last error (a revoked token, Telegram unreachable)."""

from __future__ import annotations

from django.conf import settings

from messaging_app.models import BotState
from messaging_app.telegram.state import NAME


def bot_state() -> BotState | None:
    return BotState.objects.filter(name=NAME).first()


def health() -> str | None:
    """None when Telegram is off; "ok" or the problem."""
    if not settings.TELEGRAM_BOT_TOKEN:
        return None
    row = bot_state()
    if row is None or not row.last_error:
        return "ok"
    return f"error: {row.last_error}"
