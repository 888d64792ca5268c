"""Webhook mode (TELEGRAM_MODE=webhook, behind NAVI_HTTPS with a public TELEGRAM_WEBHOOK_URL):
registering the URL with its secret header; the view that receives updates is webhook_view."""

from __future__ import annotations

import hashlib
import hmac
import logging

from channels.db import database_sync_to_async
from django.conf import settings

from messaging_app.telegram import state
from messaging_app.telegram.poller import ALLOWED_UPDATES, describe
from navi_project.lazy import lazy_module

telegram = lazy_module("telegram")  # python-telegram-bot, ~80 ms of boot: first used with a bot token

log = logging.getLogger("navi.telegram")


def webhook_secret() -> str:
    """TELEGRAM_WEBHOOK_SECRET, else one derived from SECRET_KEY (stable across workers and restarts)."""
    if settings.TELEGRAM_WEBHOOK_SECRET:
        return settings.TELEGRAM_WEBHOOK_SECRET
    return hmac.new(settings.SECRET_KEY.encode(), b"navi telegram webhook", hashlib.sha256).hexdigest()


def webhook_problem() -> str:
    """Why webhook mode cannot start here, or ""."""
    url = settings.TELEGRAM_WEBHOOK_URL
    if not settings.NAVI_HTTPS or not url.startswith("https://"):
        return ("TELEGRAM_MODE=webhook needs NAVI_HTTPS=true and TELEGRAM_WEBHOOK_URL=https://<public host>/telegram/webhook; "
                "or use TELEGRAM_MODE=polling, which needs no public URL.")
    return ""


async def register(bot) -> None:
    """Tell Telegram where to send updates (every worker may do it: it is idempotent)."""
    problem = webhook_problem()
    if not problem:
        try:
            await bot.set_webhook(settings.TELEGRAM_WEBHOOK_URL, secret_token=webhook_secret(),
                                  allowed_updates=ALLOWED_UPDATES)
            await database_sync_to_async(state.record_ok)("")
            return
        except telegram.error.TelegramError as exc:
            problem = describe(exc)
    log.error("telegram: %s", problem)
    await database_sync_to_async(state.record_error)(problem)
