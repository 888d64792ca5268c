"""Work done once when a server process starts (not in tests, not in management commands)."""

from __future__ import annotations

import asyncio
import logging
import sys

log = logging.getLogger("navi")

# Other apps append callables here (e.g. the session-files cleanup loop).
startup_hooks: list = []


def on_server_start() -> None:
    from agent.runs import recover_after_crash

    try:
        count = recover_after_crash()
        if count:
            log.info("marked %d answer(s) left partial by a previous crash as interrupted", count)
    except Exception:
        log.exception("start-up recovery failed (has `python manage.py migrate` been run?)")
    for hook in startup_hooks:
        try:
            hook()
        except Exception:
            log.exception("start-up hook %r failed", hook)
    _stop_runs_on_shutdown()


def _stop_runs_on_shutdown() -> None:
    """Under daphne (Twisted; no ASGI lifespan), stop runs cleanly on SIGTERM/Ctrl-C: each run
    gets its stop event, so partial answers are saved as `interrupted` before the process exits."""
    if "twisted.internet.reactor" not in sys.modules:
        return
    from twisted.internet import defer, reactor

    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is None:
        return

    def before_shutdown():
        from agent.runs import _managers

        managers = [m for m in _managers.values() if getattr(m, "_loop", None) is loop]
        if not managers:
            return None
        future = asyncio.ensure_future(asyncio.gather(*(m.shutdown() for m in managers)), loop=loop)
        return defer.Deferred.fromFuture(future)

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
