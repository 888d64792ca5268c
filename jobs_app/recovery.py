"""Heartbeats and the jobs of dead workers.

Every worker process has a `JobWorker` row whose `beat_at` it renews every JOBS_HEARTBEAT_S. A
RUNNING task belongs to the process whose lane claimed it last (`worker_ids[-1]` is
`<process>-<lane>`); when that process's heartbeat is older than JOBS_WORKER_STALE_S, or the
process is gone from this very host (its pid is dead: a restarted worker does not wait for the
heartbeat to go stale), the task is taken back: READY again, or FAILED once its worker died
JOBS_MAX_ATTEMPTS times (the app hears of it through `queue.on_give_up`).
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from . import queue, stats
from .models import JobWorker

log = logging.getLogger(__name__)
LOST = "jobs_app.recovery.WorkerLost"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:36]
    except OSError:
        return ""


HOST = f"{socket.gethostname()}/{_boot_id()}"[:200]


def pid_alive(pid: int) -> bool:
    """Is this pid a live process of this host? (A zombie, killed but not yet reaped, is not.)"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def beat(worker_id: str, lanes: int) -> None:
    now = timezone.now()
    updated = JobWorker.objects.filter(pk=worker_id).update(beat_at=now)
    if not updated:
        JobWorker.objects.update_or_create(
            pk=worker_id, defaults={"host": HOST, "pid": os.getpid(), "lanes": lanes, "started_at": now, "beat_at": now})


def leave(worker_id: str) -> None:
    JobWorker.objects.filter(pk=worker_id).delete()


def live_workers():
    """Worker rows whose heartbeat is fresh (a process that just died on this host may still be
    among them for a moment: `live_ids` leaves those out)."""
    return JobWorker.objects.filter(beat_at__gte=timezone.now() - timedelta(seconds=settings.JOBS_WORKER_STALE_S))


def live_ids() -> set[str]:
    return {w.id for w in live_workers() if not (w.host == HOST and not pid_alive(w.pid))}


def process_of(lane_id: str) -> str:
    return lane_id.rpartition("-")[0] or lane_id


def take_back() -> int:
    """Return the RUNNING tasks of dead workers to the queue (or fail them); how many."""
    live = live_ids()
    handled = 0
    for row in DBTaskResult.objects.filter(status=queue.RUNNING).only("id", "worker_ids", "started_at", "task_path",
                                                                       "args_kwargs"):
        last = row.worker_ids[-1] if row.worker_ids else ""
        if process_of(last) in live:
            continue
        attempts = len(row.worker_ids)
        now = timezone.now()
        claimed = DBTaskResult.objects.filter(pk=row.pk, status=queue.RUNNING, started_at=row.started_at)
        with transaction.atomic():
            if attempts >= settings.JOBS_MAX_ATTEMPTS:
                reason = (f"its worker stopped while running it {attempts} times (killed, or out of memory); "
                          "given up")
                if claimed.update(status=queue.FAILED, finished_at=now, exception_class_path=LOST, traceback=reason):
                    queue.gave_up(row.task_path, (row.args_kwargs or {}).get("kwargs", {}), reason)
                    stats.record(row.task_path, "lost", (now - row.started_at).total_seconds() if row.started_at else 0.0)
                    handled += 1
                    log.warning("job %s (%s) given up: %s", row.pk, row.task_path, reason)
            elif claimed.update(status=queue.READY, run_after=now):
                handled += 1
                log.warning("job %s (%s) taken back from dead worker %s (attempt %d of %d)", row.pk, row.task_path,
                            last, attempts, settings.JOBS_MAX_ATTEMPTS)
    return handled


def forget_long_dead() -> None:
    """Rows of workers silent for a day go (a clean stop deletes its own row)."""
    JobWorker.objects.filter(beat_at__lt=timezone.now() - timedelta(days=1)).delete()
