"""Long polling with a lease: exactly one worker of a cluster polls getUpdates; the others
stand by and take over once the holder stops renewing its lease (it died). The offset is
stored after each handled update, so a restart neither loses nor repeats a message."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from typing import TYPE_CHECKING, Awaitable, Callable

from channels.db import database_sync_to_async
from django.conf import settings

from messaging_app.telegram import state
from navi_project.lazy import lazy_module

if TYPE_CHECKING:
    from telegram import Bot, Update
    from telegram.error import TelegramError

errors = lazy_module("telegram.error")  # python-telegram-bot, ~80 ms of boot: first used with a bot token

log = logging.getLogger("navi.telegram")
ALLOWED_UPDATES = ["message", "callback_query"]
MAX_BACKOFF_S = 60.0
TOKEN_REFUSED = ("Telegram refused the bot token ({detail}): it was revoked or mistyped. Create a new token "
                 "with @BotFather, set TELEGRAM_BOT_TOKEN and restart Navi.")

db = database_sync_to_async


def describe(exc: TelegramError) -> str:
    """What went wrong, for the log, /health and /settings (never the token)."""
    if isinstance(exc, (errors.InvalidToken, errors.Forbidden)) and not isinstance(exc, errors.Conflict):
        return TOKEN_REFUSED.format(detail=str(exc).split("`")[0].strip() or "HTTP 401")
    if isinstance(exc, errors.Conflict):
        return ("Telegram says another program polls this bot or a webhook is set (409); stop the other "
                "program, or set TELEGRAM_MODE=webhook on every Navi worker.")
    if isinstance(exc, errors.NetworkError):
        return f"cannot reach Telegram at {settings.TELEGRAM_API_URL} ({exc}); retrying with back-off."
    return f"Telegram answered an error: {exc}"


class Poller:
    """`run()` until `stop()`; `handle(update)` is awaited for each update, in order."""

    def __init__(self, bot: Bot, handle: Callable[[Update], Awaitable[None]], *, holder: str = "",
                 lease_s: float | None = None, poll_timeout: int | None = None, first_backoff_s: float = 1.0) -> None:
        self.bot, self.handle = bot, handle
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_s = float(lease_s if lease_s is not None else settings.TELEGRAM_LEASE_S)
        self.poll_timeout = int(poll_timeout if poll_timeout is not None else settings.TELEGRAM_POLL_TIMEOUT_S)
        self.first_backoff_s = first_backoff_s
        self.polling = False  # this worker holds the lease
        self.standby_checks = 0  # times it found the lease held by another worker
        self.error = ""
        self.bot_username = ""
        self._stopping = asyncio.Event()
        self.task: asyncio.Task | None = None

    def start(self) -> asyncio.Task:
        self.task = asyncio.create_task(self.run(), name=f"telegram-poller-{self.holder}")
        return self.task

    async def stop(self) -> None:
        """Clean shutdown: stop polling and hand the lease over at once."""
        self._stopping.set()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        with contextlib.suppress(Exception):
            await db(state.release_lease)(self.holder)
        self.polling = False

    async def run(self) -> None:
        backoff = self.first_backoff_s
        while not self._stopping.is_set():
            try:
                leased = await db(state.take_lease)(self.holder, self.lease_s)
            except Exception:  # a database hiccup (locked, restarting) must not end the poller
                log.exception("telegram: the poll lease could not be read; retrying in %.0f s", backoff)
                await self._pause(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            if not leased:
                self.polling = False
                self.standby_checks += 1
                await self._pause(min(self.lease_s / 3, 5.0))  # stand by: is the holder still alive?
                continue
            if not self.polling:
                log.info("telegram: %s polls for updates", self.holder)
            self.polling = True
            try:
                await self._poll_once()
            except errors.TelegramError as exc:
                backoff = await self._failed(exc, backoff)
            except Exception:
                log.exception("telegram: polling failed; retrying in %.0f s", backoff)
                await self._pause(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            else:
                backoff = self.first_backoff_s

    async def _poll_once(self) -> None:
        if not self.bot_username:
            me = await self.bot.get_me()
            await self.bot.delete_webhook()  # a webhook left from webhook mode would refuse getUpdates (409)
            self.bot_username = me.username or ""
            await db(state.record_ok)(self.bot_username)
        offset = await db(state.offset)()
        updates = await self.bot.get_updates(offset=offset or None, timeout=self.poll_timeout,
                                             allowed_updates=ALLOWED_UPDATES)
        if self.error:
            self.error = ""
            await db(state.record_ok)(self.bot_username)
            log.info("telegram: reachable again")
        for update in updates:
            try:
                await self.handle(update)
            except Exception:  # one bad update must not stop the bot, nor be retried forever
                log.exception("telegram: handling update %s failed", update.update_id)
            if not await db(state.store_offset)(self.holder, update.update_id + 1, self.lease_s):
                log.warning("telegram: %s lost the poll lease; another worker polls now", self.holder)
                self.polling = False
                return

    async def _failed(self, exc: TelegramError, backoff: float) -> float:
        """Record and log the problem (once, not per retry), wait, and return the next wait."""
        message = describe(exc)
        self.error = message
        if await db(state.record_error)(message):
            level = logging.ERROR if isinstance(exc, (errors.InvalidToken, errors.Forbidden, errors.Conflict)) else logging.WARNING
            log.log(level, "telegram: %s", message)
        if isinstance(exc, (errors.InvalidToken, errors.Forbidden)):
            backoff = MAX_BACKOFF_S  # a revoked token does not come back by retrying fast
        await self._pause(backoff)
        return min(backoff * 2, MAX_BACKOFF_S)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
