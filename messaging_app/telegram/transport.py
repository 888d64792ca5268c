"""Telegram as a messaging_app Transport: HTML messages within 4 096 characters, inline
buttons, files as photos or documents; every call honours 429 retry_after (client.call)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from messaging_app.telegram import render
from messaging_app.telegram.client import call
from messaging_app.transport import Buttons, Transport
from navi_project.lazy import lazy_module

if TYPE_CHECKING:
    from telegram import Bot, InlineKeyboardMarkup
    from telegram.error import BadRequest

telegram = lazy_module("telegram")  # python-telegram-bot, ~80 ms of boot: first used with a bot token

log = logging.getLogger(__name__)
PHOTO_TYPES = ("image/jpeg", "image/png", "image/webp", "image/gif")
MAX_PHOTO_BYTES = 10 * 1024 * 1024  # sendPhoto's limit; larger images go as documents
MAX_SEND_BYTES = 50 * 1024 * 1024  # sendDocument's limit on the official Bot API


def keyboard(buttons: Buttons | None) -> InlineKeyboardMarkup | None:
    if not buttons:
        return None
    rows = [[telegram.InlineKeyboardButton(b.label, callback_data=b.data) for b in row] for row in buttons]
    return telegram.InlineKeyboardMarkup(rows)


def _html(formatted: bool):
    return telegram.constants.ParseMode.HTML if formatted else None


def _unparsable(exc: BadRequest) -> bool:
    return "parse" in str(exc).lower() and "entit" in str(exc).lower()


class TelegramTransport(Transport):
    name = "telegram"

    def __init__(self, bot: Bot) -> None:
        self.bot = bot

    def chunks(self, markdown: str) -> list[str]:
        return render.chunks(markdown)

    def escape(self, text: str) -> str:
        return render.escape(text)

    async def send_text(self, chat_id: int, text: str, *, buttons: Buttons | None = None, formatted: bool = True) -> int:
        markup = keyboard(buttons)
        try:
            message = await call(lambda: self.bot.send_message(
                chat_id, text, parse_mode=_html(formatted), reply_markup=markup))
        except telegram.error.BadRequest as exc:
            if not (formatted and _unparsable(exc)):
                raise
            log.warning("telegram refused a message's HTML (%s); sent as plain text", exc)
            message = await call(lambda: self.bot.send_message(chat_id, render.plain(text), reply_markup=markup))
        return message.message_id

    async def edit_text(self, chat_id: int, message_id: int, text: str, *, buttons: Buttons | None = None,
                        formatted: bool = True) -> None:
        markup = keyboard(buttons)
        try:
            await call(lambda: self.bot.edit_message_text(
                text, chat_id=chat_id, message_id=message_id, parse_mode=_html(formatted),
                reply_markup=markup))
        except telegram.error.BadRequest as exc:
            if "not modified" in str(exc).lower():
                return
            if not (formatted and _unparsable(exc)):
                raise
            await call(lambda: self.bot.edit_message_text(
                render.plain(text), chat_id=chat_id, message_id=message_id, reply_markup=markup))

    async def send_voice(self, chat_id: int, data: bytes) -> None:
        """A voice note (Ogg/Opus): Telegram shows it with a play button and a waveform."""
        await call(lambda: self.bot.send_voice(chat_id, data))

    async def send_file(self, chat_id: int, path: Path, name: str, mime: str) -> None:
        if (await asyncio.to_thread(path.stat)).st_size > MAX_SEND_BYTES:
            await self.send_text(chat_id, render.escape(
                f"📎 {name} is larger than Telegram lets a bot send (50 MB); download it from the chat on the Navi page."))
            return
        data = await asyncio.to_thread(path.read_bytes)
        if mime in PHOTO_TYPES and len(data) <= MAX_PHOTO_BYTES:
            await call(lambda: self.bot.send_photo(chat_id, data, caption=name[:1024]))
        else:
            await call(lambda: self.bot.send_document(chat_id, data, filename=name))
