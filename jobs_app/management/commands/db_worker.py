"""`python manage.py db_worker [--lanes N] [--interval S] [--batch]`: django-tasks-db's worker
command with Navi's lanes (threads, each the engine's own loop), heartbeats and recovery of dead
workers' jobs (jobs_app.worker). Run as many as you like, on this machine or others that reach
the same PostgreSQL database: each takes jobs from the one queue."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from django.conf import settings
from django_tasks_db.management.commands.db_worker import Command as EngineCommand

from jobs_app.worker import WorkerProcess, drain
from navi_project.job_workers import die_with_parent

log = logging.getLogger("django_tasks_db")


class Command(EngineCommand):
    help = "Run Navi's background jobs (django-tasks-db's worker with lanes, heartbeats and recovery)."
    requires_system_checks = []  # `manage.py check` is the web server's; a restarted worker resumes sooner without it

    def add_arguments(self, parser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--lanes", type=int, default=settings.JOBS_WORKER_LANES,
                            help="jobs run at once in this process, one thread each (default: JOBS_WORKER_LANES)")
        parser.set_defaults(interval=settings.JOBS_POLL_S, reload=False, queue_name="")

    def handle(self, *, verbosity: int, queue_name: str, interval: float, batch: bool, lanes: int,
               worker_id: str, **options) -> None:
        die_with_parent()  # started by the web server (`make run`): it goes when the server goes
        self.configure_logging(verbosity)
        queue_names = [q for q in queue_name.split(",") if q] or None
        if options.get("reload"):
            log.warning("--reload is not supported here: restart the worker after a code change")
        if batch:
            drain(timeout=float("inf"), queue_names=queue_names)
            return
        stop = threading.Event()
        worker = WorkerProcess(lanes=lanes, interval=interval, worker_id=worker_id[:24], queue_names=queue_names)

        def on_signal(signum, frame) -> None:
            if stop.is_set():
                log.warning("second %s: stopping now", signal.strsignal(signum))
                os._exit(1)
            log.warning("%s: finishing the running slices, then stopping (again to stop now)", signal.strsignal(signum))
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        try:
            worker.run(stop)
        finally:
            if not worker.stop(timeout=settings.JOBS_STOP_TIMEOUT_S):
                log.warning("a job did not stop within %.0f s; it is taken back by the next worker",
                            settings.JOBS_STOP_TIMEOUT_S)
                sys.stdout.flush()
                os._exit(0)
