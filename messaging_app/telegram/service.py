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
from messaging_app.telegram.webhook import register as register_webhook

log = logging.getLogger("navi.telegram")


class TelegramService:
    def __init__(self, bot=None, **poller_options) -> None:
        self.bot = bot or make_bot()
        self.handler = UpdateHandler(self.bot)
        self.poller = Poller(self.bot, self.handler, **poller_options)
        self.webhook_task: asyncio.Task | None = None
        self.inbox: asyncio.Queue = asyncio.Queue()  # webhook updates, handled in order by one task
        self.inbox_task: asyncio.Task | None = None

    def start(self) -> None:
        if settings.TELEGRAM_MODE == "polling":
            self.poller.start()
        else:  # the webhook view queues updates for inbox_task
            self.webhook_task = asyncio.create_task(register_webhook(self.bot), name="telegram-set-webhook")
            self.inbox_task = asyncio.create_task(self._handle_inbox(), name="telegram-webhook-inbox")

    def enqueue(self, update) -> None:
        """From the webhook view: handled by this service's own task, not in the request, whose
        context (and thread executor) ends with the response while a run it starts goes on."""
        self.inbox.put_nowait(update)

    async def _handle_inbox(self) -> None:
        while True:
            update = await self.inbox.get()
            try:
                await self.handler(update)
            except Exception:
                log.exception("telegram: handling webhook update %s failed", update.update_id)

    async def stop(self) -> None:
        for task in (self.webhook_task, self.inbox_task):
            if task is not None:
                task.cancel()
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
