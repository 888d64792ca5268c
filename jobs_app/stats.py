"""Job durations and outcomes, added up in the database by the worker that ran each job (so
`GET /metrics` on any web process shows every worker's, on every machine), and old results
pruned."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_tasks.signals import task_finished
from django_tasks_db.models import DBTaskResult

from . import queue
from .models import JobStat

log = logging.getLogger(__name__)
BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)  # seconds; one more bucket for longer
# What a task may return to say how it ended (anything else counts as "ok").
OUTCOMES = {"ok", "ready", "failed", "cancelled", "continued", "postponed", "skipped", "superseded"}


def name_of(task_path: str) -> str:
    return task_path.rpartition(".")[2] or task_path


def record(task_path: str, outcome: str, seconds: float) -> None:
    """One finished job of `task_path` with `outcome`, which took `seconds`."""
    seconds = max(0.0, seconds)
    slot = next((i for i, limit in enumerate(BUCKETS) if seconds <= limit), len(BUCKETS))
    name = name_of(task_path)[:200]
    for _ in range(2):  # a concurrent first insert of the same row: update it the second time
        try:
            with transaction.atomic():
                stat, _ = JobStat.objects.select_for_update().get_or_create(
                    task=name, outcome=outcome[:32], defaults={"buckets": [0] * (len(BUCKETS) + 1)})
                buckets = list(stat.buckets or []) + [0] * (len(BUCKETS) + 1 - len(stat.buckets or []))
                buckets[slot] += 1
                stat.count, stat.seconds, stat.buckets = stat.count + 1, stat.seconds + seconds, buckets
                stat.save(update_fields=["count", "seconds", "buckets"])
            return
        except IntegrityError:
            continue


def _on_finished(sender, task_result, **kwargs) -> None:
    """django-tasks' task_finished, in the worker that ran the job."""
    try:
        if task_result.status == queue.FAILED:
            outcome = "error"
        else:
            value = getattr(task_result, "_return_value", None)
            outcome = value if isinstance(value, str) and value in OUTCOMES else "ok"
        started, finished = task_result.started_at, task_result.finished_at
        seconds = (finished - started).total_seconds() if started and finished else 0.0
        record(task_result.task.module_path, outcome, seconds)
    except Exception:  # the numbers must never fail a job
        log.exception("could not record a finished job")


def connect() -> None:
    task_finished.connect(_on_finished, dispatch_uid="jobs_app.stats")


def prune_results() -> None:
    """Finished jobs' rows older than JOBS_KEEP_RESULTS_DAYS go (their totals stay in JobStat)."""
    before = timezone.now() - timedelta(days=settings.JOBS_KEEP_RESULTS_DAYS)
    DBTaskResult.objects.filter(status__in=[queue.FAILED, "SUCCESSFUL"], finished_at__lt=before).delete()
