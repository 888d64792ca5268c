"""The Bot API client: python-telegram-bot's `Bot` pointed at TELEGRAM_API_URL, and `call`,
which honours Telegram's flood control (429 retry_after) instead of failing."""

from __future__ import annotations

import asyncio
import logging
import os
import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Awaitable, Callable, TypeVar

from django.conf import settings

from navi_project.lazy import lazy_module

if TYPE_CHECKING:
    from telegram import Bot
    from telegram.error import RetryAfter

telegram = lazy_module("telegram")  # python-telegram-bot, ~80 ms of boot: first used with a bot token

# python-telegram-bot 22 warns that RetryAfter.retry_after becomes a timedelta; opt in now
# (retry_after_s reads either form).
os.environ.setdefault("PTB_TIMEDELTA", "true")

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_RETRY_AFTER_S = 120.0  # a longer ban is reported, not slept through
RETRIES = 5


def make_bot(token: str | None = None) -> Bot:
    """A Bot for TELEGRAM_BOT_TOKEN; getUpdates gets its own connection, held for the long poll."""
    base = settings.TELEGRAM_API_URL.rstrip("/")
    poll_read = float(settings.TELEGRAM_POLL_TIMEOUT_S) + 10
    return telegram.Bot(
        token or settings.TELEGRAM_BOT_TOKEN,
        base_url=f"{base}/bot",
        base_file_url=f"{base}/file/bot",
        request=telegram.request.HTTPXRequest(connection_pool_size=8, read_timeout=20, media_write_timeout=60),
        get_updates_request=telegram.request.HTTPXRequest(connection_pool_size=1, read_timeout=poll_read),
    )


def retry_after_s(exc: RetryAfter) -> float:
    """RetryAfter.retry_after is an int or a timedelta depending on PTB_TIMEDELTA; seconds either way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


async def call(make: Callable[[], Awaitable[T]], *, retries: int = RETRIES) -> T:
    """Run one Bot API call; on 429 wait the `retry_after` Telegram asks for, then try again."""
    for attempt in range(retries + 1):
        try:
            return await make()
        except telegram.error.RetryAfter as exc:
            wait = retry_after_s(exc)
            if attempt == retries or wait > MAX_RETRY_AFTER_S:
                raise
            log.info("telegram: flood control, retrying in %.0f s", wait)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")
