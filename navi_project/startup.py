"""Work done once when a server process starts (not in tests, not in management commands).

navi_project.asgi sends `server_started`; each app connects its own start-up work to it in
its AppConfig.ready (crash recovery and clean shutdown of runs, the routine scheduler). Background
work is not started here: it is the job workers' (jobs_app).
"""

from __future__ import annotations

import logging

from django.dispatch import Signal

log = logging.getLogger("navi")

server_started = Signal()


def on_server_start() -> None:
    """Send `server_started`; a receiver that fails is logged and the others still run."""
    for receiver, result in server_started.send_robust(sender=None):
        if isinstance(result, Exception):
            log.error("start-up work %r failed", receiver, exc_info=result)
