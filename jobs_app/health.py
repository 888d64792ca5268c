"""What /health says about the queue: jobs waiting, how long the oldest has waited, live workers."""

from __future__ import annotations

from django.db.models import Min
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from .recovery import live_ids

START_HINT = "start one with `python manage.py db_worker` (`make run` starts one beside the web server)"


def queue_state() -> tuple[int, float, int]:
    """(jobs due and waiting, seconds the oldest of them has waited, live worker processes)."""
    due = DBTaskResult.objects.ready()
    found = due.aggregate(oldest=Min("enqueued_at"))
    queued = due.count() if found["oldest"] is not None else 0
    oldest_s = (timezone.now() - found["oldest"]).total_seconds() if found["oldest"] is not None else 0.0
    return queued, max(0.0, oldest_s), len(live_ids())


def jobs_health() -> dict:
    """`{"status": "ok" | why not, "queued", "oldest_s", "workers"}`: not ok when jobs wait and
    no worker is alive to take them."""
    queued, oldest_s, workers = queue_state()
    status = "ok"
    if queued and not workers:
        status = (f"no job worker is running: {queued} job(s) waiting, the oldest for {oldest_s:.0f} s; "
                  f"{START_HINT}")
    return {"status": status, "queued": queued, "oldest_s": round(oldest_s, 1), "workers": workers}
