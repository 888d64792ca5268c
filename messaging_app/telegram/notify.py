"""Send text to the owner's linked Telegram chat: the one function a notification registry
(notify_app, by kind) can register as its "telegram" sender."""

from __future__ import annotations

import logging

from django.conf import settings

from messaging_app.models import TelegramLink
from messaging_app.telegram.client import make_bot
from messaging_app.telegram.service import current
from messaging_app.telegram.transport import TelegramTransport
from navi_project.lazy import lazy_module
from notify_app.senders import BadTarget, DeliveryFailed, Notification

telegram = lazy_module("telegram")  # python-telegram-bot, ~80 ms of boot: first used with a bot token

log = logging.getLogger("navi.telegram")


async def send_to_owner(user_id: int, text: str) -> dict:
    """`{"ok": bool, "error": str}`; never raises for a failed delivery."""
    if not settings.TELEGRAM_BOT_TOKEN:
        return {"ok": False, "error": "Telegram is not configured (set TELEGRAM_BOT_TOKEN)"}
    link = await TelegramLink.objects.filter(user_id=user_id).afirst()
    if link is None:
        return {"ok": False, "error": "no Telegram account is linked; connect one in Settings"}
    service = current()
    transport = service.handler.transport if service is not None else TelegramTransport(make_bot())
    try:  # any worker may send, the poller or not
        for chunk in transport.chunks(text):
            await transport.send_text(link.chat_id, chunk)
    except telegram.error.TelegramError as exc:
        log.warning("telegram: a notification to user %s failed: %s", user_id, exc)
        return {"ok": False, "error": f"Telegram refused the message: {exc}"}
    finally:
        if service is None:
            await transport.bot.shutdown()
    return {"ok": True, "error": ""}


class TelegramSender:
    """notify_app's "telegram" kind: routine results and waiting approvals to the linked chat."""

    kind = "telegram"

    def clean(self, data: dict) -> dict:
        if not settings.TELEGRAM_BOT_TOKEN:
            raise BadTarget("Telegram is not set up on this server (TELEGRAM_BOT_TOKEN); use Web Push or an Apprise URL")
        return {}  # the address is the owner's linked chat, looked up at each delivery

    def describe(self, target) -> str:
        return "your linked Telegram chat"

    async def send(self, target, note: Notification) -> None:
        text = f"**{note.title}**\n\n{note.body}"
        if settings.NAVI_PUBLIC_URL and note.url:
            text += f"\n\n{settings.NAVI_PUBLIC_URL.rstrip('/')}{note.url}"
        outcome = await send_to_owner(target.owner_id, text)
        if not outcome["ok"]:
            raise DeliveryFailed(outcome["error"])
