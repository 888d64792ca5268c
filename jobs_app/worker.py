"""A worker process: lanes that each run django-tasks-db's own worker loop in a thread, and a
main loop that beats, takes back the jobs of dead workers, restarts a lane that died, and runs
the apps' periodic checks (`schedule`).

Lane 0 also takes the `serial` queue: jobs that must not run beside each other in one process
(memory extraction asks the one model server; one call at a time, as before). Two lanes by
default: one long parse (its child process does the work) leaves the other lane free for the
next account's small document.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import connection
from django.utils import timezone
from django.utils.crypto import get_random_string
from django_tasks_db.management.commands.db_worker import Worker as EngineWorker
from django_tasks_db.models import DBTaskResult

from . import queue, recovery, runtime, schedule

log = logging.getLogger(__name__)
SERIAL, DEFAULT = queue.SERIAL, queue.DEFAULT


def new_id() -> str:
    return "w" + get_random_string(15).lower()


def lane_worker(worker_id: str, number: int, *, interval: float, batch: bool = False,
                queue_names: list[str] | None = None) -> EngineWorker:
    names = queue_names or ([DEFAULT, SERIAL] if number == 0 else [DEFAULT])
    return EngineWorker(queue_names=names, interval=interval, batch=batch, backend_name="default",
                        startup_delay=False, max_tasks=None, worker_id=f"{worker_id}-{number}", excluded_queue_names=[])


class WorkerProcess:
    """`start()`, then `tick()` every JOBS_HEARTBEAT_S (or `run(stop)`), then `stop()`."""

    def __init__(self, lanes: int | None = None, interval: float | None = None, worker_id: str | None = None,
                 queue_names: list[str] | None = None) -> None:
        self.id = (worker_id or new_id())[:32]
        self.interval = settings.JOBS_POLL_S if interval is None else interval
        self.queue_names = queue_names
        count = max(1, lanes or settings.JOBS_WORKER_LANES)
        self.lanes = [lane_worker(self.id, n, interval=self.interval, queue_names=queue_names) for n in range(count)]
        self.threads: list[threading.Thread | None] = [None] * count
        self._beats = 0

    def start(self) -> WorkerProcess:
        runtime.stopping.clear()
        schedule.reset()
        recovery.beat(self.id, len(self.lanes))
        recovery.take_back()  # a restarted worker resumes its predecessor's jobs now, not once its beat is stale
        for number in range(len(self.lanes)):
            self._start_lane(number)
        log.info("job worker %s: %d lane(s)", self.id, len(self.lanes))
        return self

    def _start_lane(self, number: int) -> None:
        thread = threading.Thread(target=self._run_lane, args=(self.lanes[number],), name=f"job-lane-{number}",
                                  daemon=True)
        self.threads[number] = thread
        thread.start()

    @staticmethod
    def _run_lane(lane: EngineWorker) -> None:
        try:
            lane.run()
        except Exception:  # e.g. the database went away: the main loop starts the lane again
            log.exception("job lane %s stopped", lane.worker_id)
        finally:
            connection.close()

    def tick(self) -> None:
        """One heartbeat: beat, every third one take back dead workers' jobs, run due checks."""
        self._beats += 1
        try:
            recovery.beat(self.id, len(self.lanes))
            if self._beats % 3 == 0:
                recovery.take_back()
            schedule.run_due()
        except Exception:
            log.exception("job worker %s: heartbeat failed", self.id)
            connection.close()
        if not runtime.should_stop():
            for number, thread in enumerate(self.threads):
                if thread is not None and not thread.is_alive():
                    self.lanes[number] = lane_worker(self.id, number, interval=self.interval,
                                                     queue_names=self.queue_names)
                    self._start_lane(number)

    def run(self, stop: threading.Event) -> None:
        self.start()
        while not stop.wait(settings.JOBS_HEARTBEAT_S):
            self.tick()

    def stop(self, timeout: float = 10.0) -> bool:
        """Ask every lane to stop after its job (running jobs see `runtime.should_stop` and end
        their slice early); True if all stopped within `timeout`."""
        runtime.stopping.set()
        for lane in self.lanes:
            lane.running = False
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        stopped = not any(t is not None and t.is_alive() for t in self.threads)
        try:
            if stopped:
                recovery.leave(self.id)
        finally:
            connection.close()
        return stopped


def drain(timeout: float = 60.0, queue_names: list[str] | None = None) -> bool:
    """Run every queued job in this thread with the engine's loop (batch mode) until none waits;
    a job deferred to a moment within `timeout` is waited for. False on timeout. What tests and
    `knowledge_embed` use: the same tasks, the same engine, no second thread."""
    worker_id = new_id()
    lane = lane_worker(worker_id, 0, interval=0, batch=True, queue_names=queue_names)
    deadline = time.monotonic() + timeout
    runtime.stopping.clear()
    recovery.beat(worker_id, 1)
    try:
        while True:
            lane.running = True
            lane.run()
            waiting = DBTaskResult.objects.filter(status=queue.READY)
            if queue_names:
                waiting = waiting.filter(queue_name__in=queue_names)
            else:
                waiting = waiting.filter(queue_name__in=[DEFAULT, SERIAL])
            first = waiting.order_by("run_after").values_list("run_after", flat=True).first()
            if first is None:
                return True
            wait = (first - timezone.now()).total_seconds()
            if time.monotonic() + max(0.0, wait) > deadline:
                return False
            time.sleep(min(max(wait, 0.01), 0.5))
            recovery.beat(worker_id, 1)
    finally:
        recovery.leave(worker_id)
