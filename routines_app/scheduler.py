"""The scheduler: one asyncio loop per server process, the database decides who runs a slot.

Each pass (`Scheduler.check`):
1. live runs of other processes whose heartbeat is stale lost their process: `interrupted`,
   never run again;
2. every enabled routine whose `next_fire_at` has come: the latest due slot runs if it is
   inside the catch-up window (late, and it says so), older due slots are recorded as ONE
   `missed` row (the latest, with the count); the slot is claimed by inserting its unique
   (routine, scheduled_for) RoutineRun before anything runs: a conflict means another worker
   (or this one before a restart) has it. Then `next_slot` moves on with a conditional UPDATE
   (only from the value read), so nothing but the scheduler ever moves it. The claims and
   moves of up to CLAIM_CHUNK routines are one transaction of two statements (200 routines
   due at once cost ~400 commits before);
3. the claimed runs' chats are made in one more hop, then each starts an agent run in its chat
   (`origin="routine"`), whose frames set the row's status (waiting_approval, then ok / failed
   / stopped). `started_at` is when that run's turn has begun (the instruction saved).

The loop sleeps until the earliest next fire (at most MAX_SLEEP_S; `wake()` cuts it short when
a routine is created or changed in this process). The clock is injected (`now`), so tests move
time without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import random
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Min
from django.utils import timezone

from agent.runs.manager import RunActive, get_run_manager
from navi_project import hotsql, metrics
from navi_project.hop import db_hop
from sessions_app.models import Session, UserSettings

from . import delivery, services
from . import schedule as sched
from .models import Routine, RoutineRun
from .turns import mark_turn

log = logging.getLogger(__name__)

Status = RoutineRun.Status
MAX_SLEEP_S = 20.0
HEARTBEAT_S = 10.0
BATCH = 500  # due routines handled per pass; the rest come in the next pass, at once
CLAIM_CHUNK = 20  # slots claimed per transaction: on PostgreSQL the workers claim side by side
LATE_NOTE_S = 60.0  # a run this late says so
BUSY_RETRY_S = 2.0
BUSY_GIVE_UP_S = 120.0  # the routine's chat had an active run for this long: failed
ORIGIN = "routine"


def stale_after() -> timedelta:
    return timedelta(seconds=float(settings.ROUTINE_STALE_S))


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _fmt(moment: datetime, tz: str) -> str:
    return moment.astimezone(sched.zone(tz)).strftime("%Y-%m-%d %H:%M %Z")


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 1:
        return f"{int(seconds)} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


class Scheduler:
    def __init__(self, now: Callable[[], datetime] = timezone.now, worker_id: str | None = None) -> None:
        self.now = now
        self.worker_id = worker_id or new_worker_id()
        self.tasks: set[asyncio.Task] = set()
        self.live: dict[int, object] = {}  # RoutineRun id -> agent run, in this process
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task | None = None

    # --- the loop ----------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the loop on `loop` (the server's); safe to call from another thread."""
        self._loop = loop
        loop.call_soon_threadsafe(self._start_main)

    def _start_main(self) -> None:
        self._wake = asyncio.Event()
        self._main = asyncio.get_running_loop().create_task(self.run_forever(), name="routines-scheduler")

    async def run_forever(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._wake is None:
            self._wake = asyncio.Event()
        await db_hop(recover_at_start, self.now())
        beater = asyncio.get_running_loop().create_task(self._heartbeat_loop(), name="routines-heartbeat")
        self.tasks.discard(beater)
        try:
            await self._passes()
        finally:
            beater.cancel()

    async def _heartbeat_loop(self) -> None:
        """Tell other workers this process's live runs are alive, well within the stale limit."""
        interval = min(HEARTBEAT_S, stale_after().total_seconds() / 3)
        while True:
            await asyncio.sleep(interval)
            if self.live:
                try:
                    await db_hop(self._beat, self.now())
                except Exception:
                    log.exception("routines: heartbeat failed")

    async def _passes(self) -> None:
        while True:
            delay = MAX_SLEEP_S
            try:
                await self.check()
                delay = await db_hop(self._seconds_to_next, self.now())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("routines: a scheduler pass failed; retrying in %.0f s", MAX_SLEEP_S)
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.2, delay))

    def wake(self) -> None:
        """Look again now (a routine was created or changed); any thread."""
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        """End the loop; runs in flight are stopped by the run manager's own shutdown."""
        if self._main is not None:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._main

    def _seconds_to_next(self, now: datetime) -> float:
        nxt = Routine.objects.filter(enabled=True, next_fire_at__isnull=False).aggregate(m=Min("next_fire_at"))["m"]
        if nxt is None:
            return MAX_SLEEP_S
        return min(MAX_SLEEP_S, max(0.0, (nxt - now).total_seconds()))

    # --- one pass ------------------------------------------------------------------------------
    async def check(self) -> list[RoutineRun]:
        """Reap dead runs, claim due slots, start their runs; returns the claimed runs."""
        now = self.now()
        claimed = await db_hop(self.claim_due, now)
        if claimed:
            try:  # every claimed run's chat in one hop; a run whose chat this misses makes its own
                await db_hop(chats_for, [(routine, run) for routine, run, _ in claimed])
            except Exception:
                log.exception("routines: preparing the chats of %d runs at once failed", len(claimed))
        for routine, run, note in claimed:
            self._spawn(self._launch(routine, run, note))
        return [run for _, run, _ in claimed]

    def claim_due(self, now: datetime) -> list[tuple[Routine, RoutineRun, str]]:
        """Sync: the pass's database work (one thread hop). Each due routine is planned on its
        own (a failure skips only that routine); the slots are then claimed CLAIM_CHUNK at a time,
        one transaction and a few statements per chunk, not two commits per routine."""
        reap(now, exclude_worker=self.worker_id)
        self._pass_start = (now, time.monotonic())
        due = list(Routine.objects.filter(enabled=True, next_fire_at__lte=now).order_by("next_fire_at")[:BATCH])
        # Workers going through the same list in the same order would meet at every row and the
        # one ahead would claim them all; in its own order each takes its share.
        random.shuffle(due)
        plans = []
        for routine in due:
            try:
                plan = self._plan(routine, now)
            except Exception:
                log.exception("routines: routine %s could not be scheduled", routine.pk)
                continue
            if plan is not None:
                plans.append(plan)
        out = []
        for start in range(0, len(plans), CLAIM_CHUNK):
            # In id order inside a chunk: two workers' transactions then take row locks in the
            # same order and cannot deadlock (PostgreSQL); the shuffle still splits the work.
            chunk = sorted(plans[start:start + CLAIM_CHUNK], key=lambda plan: plan.routine.pk)
            try:
                out += self._claim_chunk(chunk, now)
            except Exception:
                log.exception("routines: claiming %d due slots at once failed; claiming them one by one", len(chunk))
                for plan in chunk:
                    try:
                        out += self._claim_chunk([plan], now, one_by_one=True)
                    except Exception:
                        log.exception("routines: routine %s could not be scheduled", plan.routine.pk)
        return out

    def _beat(self, now: datetime) -> None:
        if self.live:
            RoutineRun.objects.filter(pk__in=list(self.live), status__in=RoutineRun.LIVE).update(heartbeat=now)

    def _plan(self, routine: Routine, now: datetime) -> _Plan | None:
        """What to do with one due routine: the slot to run (or none), the missed ones recorded
        here; None when it was not due after all."""
        s = routine.parsed()
        first = routine.next_slot
        latest = self._latest_due(routine, s, now)
        if first is None or latest is None or latest < first:
            # Not due after all (the jitter changed): the same slot, its fire time recomputed.
            fire = routine.fire_time(first) if first else None
            Routine.objects.filter(pk=routine.pk, next_slot=first).update(next_fire_at=fire)
            return None
        window_start = now - timedelta(seconds=routine.catch_up_s)
        run_slot = latest if routine.fire_time(latest) >= window_start else None
        missed_upto = latest if run_slot is None else sched.slot_at_or_before(s, latest - timedelta(microseconds=1))
        if missed_upto is not None and missed_upto >= first:
            self._record_missed(routine, s, first, missed_upto, now, ran_latest=run_slot is not None)
        nxt = next(sched.slots_after(s, latest), None)
        return _Plan(routine, first, run_slot, nxt, routine.fire_time(nxt) if nxt else None)

    def _claim_chunk(self, plans: list[_Plan], now: datetime, one_by_one: bool = False) -> list[tuple]:
        """Claim the plans' slots (an insert each; a slot another worker has is skipped) and move
        every routine's pending slot on, in one transaction; the claimed (routine, run, note)."""
        moment = self._claim_moment(now)
        rows = []
        for plan in plans:
            if plan.run_slot is None:
                continue
            fire = plan.routine.fire_time(plan.run_slot)
            late = max(0.0, (moment - fire).total_seconds())
            note = ""
            if late > LATE_NOTE_S:
                note = (f"This routine was due at {_fmt(fire, plan.routine.time_zone)} and runs {_duration(late)} late "
                        "(the server was not running or was busy then).")
            rows.append((plan.routine, plan.run_slot, late, note))
        out = []
        with transaction.atomic():
            if one_by_one or not connection.features.can_return_columns_from_insert:
                for routine, slot, late, note in rows:
                    run = claim(routine, slot, now, self.worker_id, lateness_s=late, note=note)
                    if run is not None:
                        out.append((routine, run, note))
            else:
                out = claim_many(rows, now, self.worker_id)
            _advance_many(plans)
        for _, run, _ in out:
            metrics.routine_started(run.lateness_s)
        return out

    def _claim_moment(self, now: datetime) -> datetime:
        """`now` plus the time this pass has taken so far: a claim's real moment (a pass over
        many due routines takes a while), still on the injected clock."""
        start, began = getattr(self, "_pass_start", (now, time.monotonic()))
        return start + timedelta(seconds=time.monotonic() - began) if start == now else now

    def _latest_due(self, routine: Routine, s: sched.Schedule, now: datetime) -> datetime | None:
        """The latest slot whose (jittered) fire time has come."""
        slot = sched.slot_at_or_before(s, now + timedelta(seconds=routine.jitter_s))
        while slot is not None and routine.fire_time(slot) > now:
            slot = sched.slot_at_or_before(s, slot - timedelta(microseconds=1))
        return slot

    def _record_missed(self, routine: Routine, s: sched.Schedule, first: datetime, upto: datetime, now: datetime,
                       ran_latest: bool = False) -> None:
        count, more = 1, False
        if upto > first:
            count = 1  # `first` itself
            for slot in sched.slots_after(s, first):
                if slot > upto:
                    break
                count += 1
                if count > sched.SCAN_LIMIT:
                    more = True
                    break
        what = f"more than {sched.SCAN_LIMIT}" if more else str(count)
        span = (f"from {_fmt(first, routine.time_zone)} to {_fmt(upto, routine.time_zone)}" if count > 1
                else f"at {_fmt(upto, routine.time_zone)}")
        if ran_latest:  # a backlog inside the window: one late run stands for all of it
            error = f"missed {what} slot(s) {span} while the server was not running; only the latest slot runs, late"
        else:
            error = (f"missed {what} slot(s) {span}: the server was not running, and they are older than the "
                     f"catch-up window of {_duration(routine.catch_up_s)}")
        try:
            with transaction.atomic():
                RoutineRun.objects.create(routine=routine, scheduled_for=upto, status=Status.MISSED,
                                          finished_at=now, error=error)
        except IntegrityError:
            return
        metrics.routine_run(Status.MISSED)

    # --- running a claimed slot ------------------------------------------------------------------
    def _spawn(self, coro) -> asyncio.Task:
        # A fresh context: a run started from a request must not keep the request's
        # thread-sensitive context (asgiref's executor for it ends with the request).
        task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def idle(self) -> None:
        """Until every run this scheduler started has finished (tests, shutdown)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    async def run_now(self, routine: Routine) -> RoutineRun:
        """A manual run (POST /routines/<id>/run): its own row, started at once in this process."""
        now = self.now()
        run = await db_hop(claim, routine, now, now, self.worker_id, manual=True)
        self._spawn(self._launch(routine, run, ""))
        return run

    async def _launch(self, routine: Routine, run: RoutineRun, note: str) -> None:
        self.live[run.pk] = None
        try:
            if getattr(run, "gone", False):
                return  # the routine was deleted before its turn began: it never begins
            session_id = str(run.session_id) if run.session_id else await db_hop(chat_for, routine, run)
            text = routine.instruction if not note else f"({note})\n\n{routine.instruction}"
            if origin := services.origin_note(routine):  # its chat says where it came from
                text = f"{origin}\n\n{text}"
            agent_run = await self._start_run(session_id, text, run, services.run_taint(routine))
            if agent_run is None:
                return
            begun = self.now()  # the turn has begun; written with the run id in the next hop
            self.live[run.pk] = agent_run
            if not await db_hop(_begin, session_id, routine, run, agent_run.run_id, begun):
                agent_run.stop_event.set()  # deleted while the turn began (a delete could not see it yet)
            await agent_run.done.wait()
            await self._finish(routine, run, agent_run)
        except Exception as exc:
            log.exception("routines: run %s of routine %s failed to start", run.pk, routine.pk)
            await db_hop(_close, run, Status.FAILED, f"the run could not start: {type(exc).__name__}: {exc}", self.now())
        finally:
            self.live.pop(run.pk, None)

    async def _start_run(self, session_id: str, text: str, run: RoutineRun, taint: str = ""):
        manager = get_run_manager()
        waited = 0.0
        while True:
            try:
                return await manager.start(
                    session_id, text, origin=ORIGIN,
                    approval_timeout_s=float(settings.ROUTINE_APPROVAL_TIMEOUT_S),
                    listeners=[self._listener(run)], taint=taint,
                )
            except RunActive:
                if waited >= BUSY_GIVE_UP_S:
                    await db_hop(_close, run, Status.FAILED, "the routine's chat was busy with another answer for "
                                 f"{int(BUSY_GIVE_UP_S)} s; it did not run. Use Run now on /routines/ to try again.", self.now())
                    return None
                await asyncio.sleep(BUSY_RETRY_S)
                waited += BUSY_RETRY_S

    def _listener(self, run: RoutineRun):
        """Frames of the agent run that change the routine run's status."""
        def on_frame(agent_run, frame: dict) -> None:
            kind = frame.get("type")
            if kind == "approval_required":
                self._spawn(self._waiting(run, frame))
            elif kind == "approval_resolved":
                self._spawn(db_hop(_set_status, run.pk, Status.WAITING_APPROVAL, Status.RUNNING))
        return on_frame

    async def _waiting(self, run: RoutineRun, frame: dict) -> None:
        await db_hop(_set_status, run.pk, Status.RUNNING, Status.WAITING_APPROVAL)
        await Session.objects.filter(pk=run.session_id).aupdate(unread=True)  # the approval card waits there
        routine = await Routine.objects.aget(pk=run.routine_id)
        outcome = await delivery.deliver(
            routine, run, title=f"Approval needed: {routine.name}",
            body=f"The routine '{routine.name}' wants to use {frame.get('tool')}: {frame.get('reason', '')}. "
                 "Open the chat to approve or deny.",
        )
        await db_hop(_add_deliveries, run.pk, outcome)

    async def _finish(self, routine: Routine, run: RoutineRun, agent_run) -> None:
        shut_down = getattr(agent_run, "shut_down", False)  # the server stopped it, not the owner
        if shut_down and not agent_run.answered:
            status, error, body = Status.INTERRUPTED, SHUT_DOWN_ERROR, "The run was interrupted: the server shut down."
        elif agent_run.stopped and not shut_down:
            status, error, body = Status.STOPPED, "stopped before it finished", "The run was stopped."
        elif agent_run.error:
            status, error, body = Status.FAILED, agent_run.error, f"It failed: {agent_run.error}"
        else:
            status, error, body = Status.OK, "", agent_run.final_content or ""
        note = run.error if status == Status.OK else error
        await db_hop(_close, run, status, note, self.now(), run.session_id)
        if agent_run.stopped and not await Routine.objects.filter(pk=routine.pk).aexists():
            return  # stopped by deleting the routine: the owner knows
        if status == Status.FAILED:
            outcome = await delivery.failure(routine, run, error, getattr(agent_run, "error_code", ""))
        else:
            outcome = await delivery.deliver(routine, run, title=routine.name, body=body)
        await db_hop(_add_deliveries, run.pk, outcome)


# --- database steps (sync; called through db_hop) -------------------------------------------------
def claim(routine: Routine, slot: datetime, now: datetime, worker_id: str, *, lateness_s: float = 0.0,
          manual: bool = False, note: str = "") -> RoutineRun | None:
    """Insert the slot's row: the claim. None when another worker (or an earlier life of this
    one) already has the slot."""
    try:
        with transaction.atomic():
            return RoutineRun.objects.create(
                routine=routine, scheduled_for=slot, manual=manual, status=Status.RUNNING, worker_id=worker_id,
                heartbeat=now, started_at=now, lateness_s=lateness_s, error=note,
            )
    except IntegrityError:
        return None


@dataclass
class _Plan:
    routine: Routine
    first: datetime  # the pending slot this pass read (the advance is conditional on it)
    run_slot: datetime | None  # the slot to run now, if any
    next_slot: datetime | None
    next_fire: datetime | None


_CLAIM_FIELDS = ("routine", "scheduled_for", "manual", "status", "session", "run_id", "worker_id", "heartbeat",
                 "started_at", "finished_at", "lateness_s", "error", "deliveries")


def claim_many(rows: list[tuple[Routine, datetime, float, str]], now: datetime, worker_id: str) -> list[tuple]:
    """Claim many slots with one INSERT ... ON CONFLICT DO NOTHING RETURNING (SQLite >= 3.35,
    PostgreSQL): the rows it returns are this worker's; a slot another worker inserted first is
    simply not among them. Call inside a transaction."""
    if not rows:
        return []
    values = []
    for routine, slot, late, note in rows:
        given = {"routine": routine.pk, "scheduled_for": slot, "manual": False, "status": Status.RUNNING,
                 "session": None, "run_id": "", "worker_id": worker_id, "heartbeat": now, "started_at": now,
                 "finished_at": None, "lateness_s": late, "error": note, "deliveries": []}
        values += [hotsql.prep(RoutineRun, name, given[name]) for name in _CLAIM_FIELDS]
    columns = ", ".join(hotsql.column(RoutineRun, name) for name in _CLAIM_FIELDS)
    one = "(" + ", ".join(["%s"] * len(_CLAIM_FIELDS)) + ")"
    sql = (f"INSERT INTO {hotsql.table(RoutineRun)} ({columns}) VALUES {', '.join([one] * len(rows))} "
           f"ON CONFLICT DO NOTHING RETURNING {hotsql.column(RoutineRun, 'id')}, {hotsql.column(RoutineRun, 'routine')}")
    got = dict((routine_id, pk) for pk, routine_id in hotsql.values(sql, values))
    out = []
    for routine, slot, late, note in rows:
        if routine.pk in got:
            run = RoutineRun(pk=got[routine.pk], routine=routine, scheduled_for=slot, status=Status.RUNNING,
                             worker_id=worker_id, heartbeat=now, started_at=now, lateness_s=late, error=note)
            run._state.adding = False
            out.append((routine, run, note))
    return out


def _advance_many(plans: list[_Plan]) -> None:
    """Move each routine's pending slot past the slot handled, only from the value this pass
    read (another worker may have moved it already)."""
    sql = (f"UPDATE {hotsql.table(Routine)} SET {hotsql.column(Routine, 'next_slot')} = %s, "
           f"{hotsql.column(Routine, 'next_fire_at')} = %s WHERE {hotsql.column(Routine, 'id')} = %s "
           f"AND {hotsql.column(Routine, 'next_slot')} = %s")
    params = [(hotsql.prep(Routine, "next_slot", p.next_slot), hotsql.prep(Routine, "next_fire_at", p.next_fire),
               p.routine.pk, hotsql.prep(Routine, "next_slot", p.first)) for p in plans]
    if params:
        with connection.cursor() as cursor:
            cursor.executemany(sql, params)


def chats_for(pairs: list[tuple[Routine, RoutineRun]]) -> None:
    """`chat_for` for many claimed runs in one transaction (a few statements in all): each
    routine's chat, made where missing, on the routine's profile, recorded on the run. A run
    whose row is gone (its routine was deleted meanwhile) is marked `gone`."""
    owners = {routine.owner_id for routine, _ in pairs}
    defaults = dict(UserSettings.objects.filter(user_id__in=owners).values_list("user_id", "default_profile_id"))
    existing = {s.pk: s for s in Session.objects.filter(pk__in=[r.session_id for r, _ in pairs if r.session_id])}
    made, moved_profile, linked, chat_of = [], [], [], {}
    for routine, run in pairs:
        profile_id = routine.profile_id or defaults.get(routine.owner_id) or settings.NAVI_DEFAULT_PROFILE
        session = existing.get(routine.session_id)
        if session is None or session.owner_id != routine.owner_id:
            session = Session(owner_id=routine.owner_id, profile_id=profile_id, title=routine.name[:200],
                              title_source="user", origin=ORIGIN)
            made.append(session)
            linked.append((routine, session))
        elif session.profile_id != profile_id:
            moved_profile.append((session.pk, profile_id))
            session.profile_id = profile_id
        chat_of[run.pk] = session.pk
    with transaction.atomic():
        Session.objects.bulk_create(made)
        with connection.cursor() as cursor:
            table_r, table_s, table_rr = hotsql.table(Routine), hotsql.table(Session), hotsql.table(RoutineRun)
            if linked:
                cursor.executemany(
                    f"UPDATE {table_r} SET {hotsql.column(Routine, 'session')} = %s WHERE {hotsql.column(Routine, 'id')} = %s",
                    [(hotsql.prep(Routine, "session", s.pk), r.pk) for r, s in linked])
            if moved_profile:
                cursor.executemany(
                    f"UPDATE {table_s} SET {hotsql.column(Session, 'profile')} = %s WHERE {hotsql.column(Session, 'id')} = %s",
                    [(profile_id, hotsql.prep(Session, "id", pk)) for pk, profile_id in moved_profile])
            cursor.executemany(
                f"UPDATE {table_rr} SET {hotsql.column(RoutineRun, 'session')} = %s WHERE {hotsql.column(RoutineRun, 'id')} = %s",
                [(hotsql.prep(RoutineRun, "session", chat_of[run.pk]), run.pk) for _, run in pairs])
        alive = set(RoutineRun.objects.filter(pk__in=[run.pk for _, run in pairs]).values_list("pk", flat=True))
    # Only now, committed: a run left without its chat here makes its own (chat_for) at launch.
    for routine, session in linked:
        routine.session_id = session.pk
    for _, run in pairs:
        run.session_id = chat_of[run.pk]
        run.gone = run.pk not in alive


def chat_for(routine: Routine, run: RoutineRun) -> str:
    """The routine's chat (made on first use, or again if the owner deleted it), on the
    routine's profile; recorded on the run."""
    profile_id = routine.profile_id or _default_profile(routine.owner_id)
    session = Session.objects.filter(pk=routine.session_id, owner_id=routine.owner_id).first() if routine.session_id else None
    if session is None:
        session = Session.objects.create(owner_id=routine.owner_id, profile_id=profile_id,
                                         title=routine.name[:200], title_source="user", origin=ORIGIN)
        Routine.objects.filter(pk=routine.pk).update(session=session)
        routine.session_id = session.pk
    elif session.profile_id != profile_id:
        Session.objects.filter(pk=session.pk).update(profile_id=profile_id)
    RoutineRun.objects.filter(pk=run.pk).update(session=session)
    run.session_id = session.pk
    return str(session.pk)


def _default_profile(user_id: int) -> str:
    prefs = UserSettings.objects.filter(user_id=user_id).first()
    return (prefs.default_profile_id if prefs else None) or settings.NAVI_DEFAULT_PROFILE


def _begin(session_id: str, routine: Routine, run: RoutineRun, run_id: str, begun) -> bool:
    """The run's user row marked as the routine's words (not the owner's) and its start written,
    in one hop; False when the routine was deleted meanwhile."""
    mark_turn(session_id, routine, begun)
    return _set_started(run, run_id, begun)


def _set_started(run: RoutineRun, run_id: str, now: datetime) -> bool:
    """The agent run has begun its turn (chat ready, the instruction saved): its id and the
    moment. False when the run's row is gone (its routine was deleted)."""
    run.run_id, run.started_at = run_id, now
    return bool(RoutineRun.objects.filter(pk=run.pk).update(run_id=run_id, started_at=now))


def _set_status(pk: int, old: str, new: str) -> None:
    RoutineRun.objects.filter(pk=pk, status=old).update(status=new)


def _close(run: RoutineRun, status: str, error: str, now: datetime, session_id=None) -> None:
    """The final status (only over a live one: a reaped run stays interrupted)."""
    updated = RoutineRun.objects.filter(pk=run.pk, status__in=RoutineRun.LIVE).update(
        status=status, error=error[:4000], finished_at=now)
    run.status, run.error, run.finished_at = status, error, now
    if session_id:  # the owner has something new to read there
        Session.objects.filter(pk=session_id).update(unread=True)
    if updated:
        metrics.routine_run(status)


def _add_deliveries(pk: int, outcome: list[dict]) -> None:
    with transaction.atomic():
        row = RoutineRun.objects.select_for_update().filter(pk=pk).first()
        if row is None:  # the routine was deleted meanwhile
            return
        row.deliveries = list(row.deliveries or []) + outcome
        row.save(update_fields=["deliveries"])


def reap(now: datetime, exclude_worker: str = "") -> int:
    """Live runs whose process stopped heart-beating: interrupted, not run again."""
    dead = RoutineRun.objects.filter(status__in=RoutineRun.LIVE, heartbeat__lt=now - stale_after())
    if exclude_worker:
        dead = dead.exclude(worker_id=exclude_worker)
    return _interrupt(dead, now)


SHUT_DOWN_ERROR = ("the server shut down before it finished; it is not run again. Use Run now on /routines/ to "
                   "run it yourself.")


def _interrupt(rows, now: datetime) -> int:
    count = rows.update(
        status=Status.INTERRUPTED, finished_at=now,
        error="the server process running it stopped (crash or restart) before it finished; it is not run "
              "again. Use Run now on /routines/ to run it yourself.",
    )
    for _ in range(count):
        metrics.routine_run(Status.INTERRUPTED)
    return count


def recover_at_start(now: datetime) -> int:
    """At a process's start: without Redis this is the only worker, so every live run is dead;
    in a cluster only those whose heartbeat is stale (another worker's may be alive)."""
    if settings.REDIS_URL:
        return reap(now)
    return _interrupt(RoutineRun.objects.filter(status__in=RoutineRun.LIVE), now)


# --- one scheduler per event loop -------------------------------------------------------------------
_schedulers: dict[int, Scheduler] = {}


def get_scheduler() -> Scheduler:
    """This event loop's scheduler (the server's, or a test's)."""
    loop = asyncio.get_running_loop()
    found = _schedulers.get(id(loop))
    if found is None or found._loop is not loop:
        found = Scheduler()
        found._loop = loop
        _schedulers[id(loop)] = found
    return found


def wake_all(**kwargs) -> None:
    """A routine changed: every scheduler of this process looks again now."""
    for scheduler in list(_schedulers.values()):
        scheduler.wake()
