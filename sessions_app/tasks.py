"""sessions_app's background job: session files past their TTL deleted (run by a job worker;
every worker queues it when it starts and then hourly, once: `AppConfig.ready` registers that)."""

from __future__ import annotations

import logging

from django.conf import settings
from django_tasks import task

from jobs_app import queue

from .cleanup import cleanup_session_files

log = logging.getLogger(__name__)


@task()
def clean_session_files() -> str:
    removed = cleanup_session_files()
    if removed:
        log.info("session files: removed %d folder(s) older than %dh", len(removed), settings.SESSION_FILES_TTL_HOURS)
    return "ok"


def queue_cleanup() -> None:
    """The worker's hourly check: one cleanup job, unless one waits already."""
    queue.enqueue_once(clean_session_files)
