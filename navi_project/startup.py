"""Work done once when a server process starts (not in tests, not in management commands)."""

from __future__ import annotations

import logging

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
