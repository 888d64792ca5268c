"""`python manage.py navi_routines list|next|run ID`: every routine, the next fire times, or
one routine run now in this process (waiting for it to finish)."""

from __future__ import annotations

import asyncio

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from routines_app import services
from routines_app.models import Routine
from routines_app.scheduler import Scheduler


class Command(BaseCommand):
    help = "List routines (list), their next fire times (next) or run one now (run ID)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["list", "next", "run"])
        parser.add_argument("routine_id", nargs="?", type=int)
        parser.add_argument("--count", type=int, default=20, help="next: how many fire times")

    def handle(self, *args, action: str, routine_id: int | None, count: int, **options):
        if action == "list":
            for r in Routine.objects.select_related("owner").order_by("id"):
                state = "enabled" if r.enabled else "paused"
                self.stdout.write(f"{r.id}\t{r.owner}\t{r.name}\t{r.schedule}\t{r.time_zone}\t{state}\t"
                                  f"next: {services.describe_fires(r)}")
            return
        if action == "next":
            due = Routine.objects.filter(enabled=True, next_fire_at__isnull=False).order_by("next_fire_at")[:count]
            now = timezone.now()
            for r in due:
                late = " (due)" if r.next_fire_at <= now else ""
                self.stdout.write(f"{r.next_fire_at.isoformat()}{late}\t#{r.id}\t{r.name}\t{r.owner}")
            return
        if routine_id is None:
            raise CommandError("run needs a routine id: manage.py navi_routines run ID (see navi_routines list)")
        routine = Routine.objects.filter(pk=routine_id).first()
        if routine is None:
            raise CommandError(f"no routine {routine_id}; see navi_routines list")
        run = asyncio.run(self._run(routine))
        run.refresh_from_db()
        self.stdout.write(f"run {run.id}: {run.status}" + (f" — {run.error}" if run.error else "") +
                          (f"\tchat {run.session_id}" if run.session_id else ""))
        if run.status != "ok":
            raise CommandError(f"the run ended {run.status}")

    async def _run(self, routine: Routine):
        scheduler = Scheduler()
        beater = asyncio.create_task(scheduler._heartbeat_loop())  # the server's scheduler sees it alive
        try:
            run = await scheduler.run_now(routine)
            await scheduler.idle()
        finally:
            beater.cancel()
        return run
