"""Enqueueing and looking at the queue: fair between accounts, after the transaction commits,
and never the same job twice.

A task that works for one account takes its id as the keyword argument `owner_id`. Its priority
is minus the number of that account's jobs already waiting, so the queue (the engine orders by
priority, then by when a job became due) serves the accounts in turn: one account's tenth
document waits behind another account's first. Every job is enqueued with `run_after` = now, so
a slice that re-enqueues itself goes to the back of its priority.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, Callable

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django_tasks import TaskResultStatus
from django_tasks.base import TASK_MIN_PRIORITY, Task, TaskResult
from django_tasks_db.models import DBTaskResult

OWNER = "owner_id"
DEFAULT = "default"
SERIAL = "serial"  # a queue only lane 0 of each worker takes: its jobs never run beside each other there
READY, RUNNING, FAILED = TaskResultStatus.READY, TaskResultStatus.RUNNING, TaskResultStatus.FAILED
# task path -> what to do when the job was given up on (its worker died too often): handler(kwargs, reason)
_give_up: dict[str, Callable[[dict, str], None]] = {}


def _matching(**kwargs: Any) -> dict:
    return {f"args_kwargs__kwargs__{key}": value for key, value in kwargs.items()}


def rows(task: Task, **kwargs: Any) -> QuerySet:
    """The task's rows whose keyword arguments include `kwargs`."""
    return DBTaskResult.objects.filter(task_path=task.module_path, **_matching(**kwargs))


def fair_priority(owner_id: int | None) -> int:
    if owner_id is None:
        return 0
    waiting = DBTaskResult.objects.filter(status=READY, **_matching(owner_id=owner_id)).count()
    return max(TASK_MIN_PRIORITY, -waiting)


def enqueue(task: Task, *, delay_s: float = 0.0, **kwargs: Any) -> TaskResult:
    """Enqueue now: inside the caller's transaction the row commits with it (a worker's slice
    hands over to its next slice this way, atomically)."""
    run_after = timezone.now() + timedelta(seconds=delay_s)
    return task.using(priority=fair_priority(kwargs.get(OWNER)), run_after=run_after).enqueue(**kwargs)


def enqueue_on_commit(task: Task, *, then: Callable[[TaskResult], None] | None = None, **kwargs: Any) -> None:
    """Enqueue once the current transaction commits (at once outside one): a worker never
    picks up a job whose rows it cannot see yet. `then` gets the queued job."""

    def go() -> None:
        result = enqueue(task, **kwargs)
        if then is not None:
            then(result)

    transaction.on_commit(go)


def pending(task: Task, **kwargs: Any) -> bool:
    """Is such a job waiting or running?"""
    return rows(task, **kwargs).filter(status__in=[READY, RUNNING]).exists()


def enqueue_once(task: Task, **kwargs: Any) -> None:
    """Enqueue after the commit unless the same job (same keyword arguments) waits already."""

    def go() -> None:
        if not rows(task, **kwargs).filter(status=READY).exists():
            enqueue(task, **kwargs)

    transaction.on_commit(go)


def cancel_waiting(task: Task, **kwargs: Any) -> int:
    """Drop such jobs that have not started (a running one stops itself: it checks as it goes)."""
    deleted, _ = rows(task, **kwargs).filter(status=READY).delete()
    return deleted


def job(task_id: str) -> DBTaskResult | None:
    """The job's row (None for an id that is none: "", a marker, a row pruned since)."""
    try:
        key = uuid.UUID(str(task_id))
    except ValueError:
        return None
    return DBTaskResult.objects.filter(pk=key).first()


def is_live(task_id: str) -> bool:
    found = job(task_id)
    return found is not None and found.status in (READY, RUNNING)


def live_ids(task: Task) -> set[str]:
    """The ids (as the engine writes them: dashed) of the task's jobs waiting or running."""
    return {str(i) for i in rows(task).filter(status__in=[READY, RUNNING]).values_list("id", flat=True)}


def position(task_id: str) -> int | None:
    """1 for the next job a worker takes, 2 for the one after …; None unless it is waiting."""
    found = job(task_id)
    if found is None or found.status != READY:
        return None
    row = {"priority": found.priority, "run_after": found.run_after, "enqueued_at": found.enqueued_at}
    p, r, e = row["priority"], row["run_after"], row["enqueued_at"]
    ahead = DBTaskResult.objects.filter(status=READY).filter(
        Q(priority__gt=p) | Q(priority=p, run_after__lt=r) | Q(priority=p, run_after=r, enqueued_at__lt=e)
    )
    return ahead.count() + 1


def on_give_up(task: Task, handler: Callable[[dict, str], None]) -> None:
    """`handler(kwargs, reason)` runs when a job of `task` is given up on after its worker died
    JOBS_MAX_ATTEMPTS times (the app records the failure where its owner sees it)."""
    _give_up[task.module_path] = handler


def gave_up(task_path: str, kwargs: dict, reason: str) -> None:
    handler = _give_up.get(task_path)
    if handler is not None:
        handler(kwargs, reason)
