"""The Telegram channel of one server process: the bot, its update handler and (in polling
mode) the poller. Started from `server_started` when TELEGRAM_BOT_TOKEN is set; stopped on
shutdown (the lease is handed over at once)."""

from __future__ import annotations

import asyncio
import logging
import sys

from django.conf import settings

from messaging_app.telegram.client import make_bot
from messaging_app.telegram.handlers import UpdateHandler
from messaging_app.telegram.poller import Poller

log = logging.getLogger("navi.telegram")


class TelegramService:
    def __init__(self, bot=None, **poller_options) -> None:
        self.bot = bot or make_bot()
        self.handler = UpdateHandler(self.bot)
        self.poller = Poller(self.bot, self.handler, **poller_options)

    def start(self) -> None:
        if settings.TELEGRAM_MODE == "polling":
            self.poller.start()

    async def stop(self) -> None:
        await self.poller.stop()
        await self.handler.shutdown()
        await self.bot.shutdown()


_current: TelegramService | None = None


def current() -> TelegramService | None:
    """This process's running service (None when Telegram is off)."""
    return _current


async def start_service() -> TelegramService:
    global _current
    if _current is None:
        _current = TelegramService()
        _current.start()
    return _current


async def stop_service() -> None:
    global _current
    if _current is not None:
        service, _current = _current, None
        await service.stop()


def on_server_started(sender=None, **kwargs) -> None:
    """`server_started` receiver: under Navi's server (daphne), start the channel on the
    reactor's event loop once it runs, and stop it before the reactor shuts down."""
    if not settings.TELEGRAM_BOT_TOKEN:
        return
    if settings.TELEGRAM_MODE not in ("polling", "webhook"):
        log.error("TELEGRAM_MODE=%r: use polling or webhook; the Telegram channel is off", settings.TELEGRAM_MODE)
        return
    if "twisted.internet.reactor" not in sys.modules:
        log.warning("the Telegram channel runs under Navi's own server (make run / navi_project.serve) only")
        return
    from twisted.internet import defer, reactor  # importing the reactor installs one: only under daphne

    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is None:
        return
    reactor.callWhenRunning(lambda: asyncio.ensure_future(start_service(), loop=loop))
    reactor.addSystemEventTrigger(
        "before", "shutdown", lambda: defer.Deferred.fromFuture(asyncio.ensure_future(stop_service(), loop=loop))
    )
