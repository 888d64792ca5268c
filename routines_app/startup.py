"""Start the scheduler in a server process (`server_started`) and stop it on shutdown.

The loop runs on the server's asyncio loop (daphne's reactor), where the run manager drives
runs; each process runs its own and the database decides who runs a slot.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from . import scheduler

log = logging.getLogger("navi")


def on_server_started(sender=None, **kwargs) -> None:
    loop = _server_loop()
    if loop is None:
        log.warning("routines: no server event loop found (not under daphne); the scheduler is not running")
        return
    instance = scheduler.Scheduler()
    instance._loop = loop
    scheduler._schedulers[id(loop)] = instance
    instance.start(loop)
    _stop_on_shutdown(instance)


def _server_loop() -> asyncio.AbstractEventLoop | None:
    if "twisted.internet.reactor" not in sys.modules:
        return None
    from twisted.internet import reactor  # noqa: PLC0415 - importing the reactor installs one: only under daphne

    return getattr(reactor, "_asyncioEventloop", None)


def _stop_on_shutdown(instance: scheduler.Scheduler) -> None:
    from twisted.internet import defer, reactor  # noqa: PLC0415 - as above

    def before_shutdown():
        return defer.Deferred.fromFuture(asyncio.ensure_future(instance.stop(), loop=instance._loop))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
