"""Worker processes' heartbeats and the jobs' running totals (the task rows themselves are
django-tasks-db's `DBTaskResult`)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class JobWorker(models.Model):
    """One running worker process (`manage.py db_worker`). Its lanes claim tasks as
    `<id>-<lane>`; while `beat_at` is fresh the tasks it runs are its own, after that (or once
    its process is gone from this host) any worker takes them back."""

    id = models.CharField(primary_key=True, max_length=40)
    host = models.CharField(max_length=200)  # host name and boot id: a pid means something only there
    pid = models.IntegerField()
    lanes = models.PositiveSmallIntegerField(default=1)
    started_at = models.DateTimeField(default=timezone.now)
    beat_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.id} (pid {self.pid} on {self.host.split('/')[0]})"


class JobStat(models.Model):
    """Finished jobs of one task with one outcome: how many and how long (Prometheus counters
    kept in the database, so every worker on every machine adds to the same totals)."""

    task = models.CharField(max_length=200)
    outcome = models.CharField(max_length=32)
    count = models.BigIntegerField(default=0)
    seconds = models.FloatField(default=0.0)
    buckets = models.JSONField(default=list)  # jobs per stats.BUCKETS (not cumulative)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "outcome"], name="jobstat_unique_task_outcome")]
