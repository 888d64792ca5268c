"""The agent's start-up work (a `server_started` receiver): finish what a crash left partial,
and stop runs cleanly when the server shuts down."""

from __future__ import annotations

import asyncio
import logging
import sys

from agent.runs import manager as runs
from agent.runs import reaper

log = logging.getLogger("navi")


def on_server_started(sender=None, **kwargs) -> None:
    try:
        count = runs.recover_after_crash()
        if count:
            log.info("marked %d answer(s) left partial by a previous crash as interrupted", count)
    except Exception:
        log.exception("start-up recovery failed (has `python manage.py migrate` been run?)")
    _stop_runs_on_shutdown()
    _reap_dead_workers_runs()


def _reap_dead_workers_runs() -> None:
    """Under daphne: every worker finishes, now and then, the runs of workers that died (a
    restarted one included), within the run claim's TTL (agent.runs.reaper)."""
    if "twisted.internet.reactor" not in sys.modules:
        return
    from twisted.internet import reactor  # importing the reactor installs one: only under daphne

    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is None:
        return
    tasks = []
    loop.call_soon_threadsafe(lambda: tasks.append(loop.create_task(reaper.reap_forever(), name="run-reaper")))

    def before_shutdown():
        for task in tasks:
            task.cancel()

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)


def _stop_runs_on_shutdown() -> None:
    """Under daphne (Twisted; no ASGI lifespan), stop runs cleanly on SIGTERM/Ctrl-C: each run
    gets its stop event, so partial answers are saved as `interrupted` before the process exits."""
    if "twisted.internet.reactor" not in sys.modules:
        return
    from twisted.internet import defer, reactor  # importing the reactor installs one: only under daphne

    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is None:
        return

    def before_shutdown():
        managers = [m for m in runs._managers.values() if getattr(m, "_loop", None) is loop]
        if not managers:
            return None
        future = asyncio.ensure_future(asyncio.gather(*(m.shutdown() for m in managers)), loop=loop)
        return defer.Deferred.fromFuture(future)

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
