"""RunManager: runs are asyncio tasks owned by the process, not by a socket.

Every frame of a run is numbered (`run_id`, `seq`), kept in the run's buffer and group_sent to
`session.<id>`, where every socket on that session (any tab, any worker) listens. Control
messages (`run.stop`, `run.replay_request`) go to `runctl.<id>`, where only the process that
owns the run listens, so stop and replay work from any worker through the channel layer.

Which run is active is claimed in the database (Session.active_run_id + heartbeat) with a
conditional UPDATE, so two workers can never run two turns of one session at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from asgiref.sync import AsyncToSync, SyncToAsync, ThreadSensitiveContext
from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from agent.frames import notices
from agent.frames.events import ErrorEvent, to_frame
from agent.frames.groups import control_group, frames_group, run_event
from agent.registry import get_agent
from agent.trust import approvals
from navi_project import hotsql, metrics
from navi_project.hop import db_hop
from navi_project.logs import bind_run
from navi_project.redact import server_paths
from navi_project.redis_layer import LayerUnavailable
from sessions_app import history
from sessions_app.models import Message, Session
from tools_app.context import (
    current_approval_timeout_s,
    current_run_id,
    current_run_origin,
    current_run_taint,
    current_stop_event,
)

log = logging.getLogger(__name__)

CLAIM_TTL = history.RUN_CLAIM_TTL  # a claim whose owner stopped heart-beating is void
HEARTBEAT_S = 5.0
LOST_BEFORE_OUTAGE_S = 5.0  # frames sent this long before an outage are sent again after it
KEEP_FINISHED_S = 120.0  # finished runs stay replayable this long (a reconnect after the end)
SHUT_DOWN_TEXT = ("The server was shut down before the answer was finished; what was written so far is kept. "
                  "Send the message again for a full answer.")


def _outside_the_request() -> contextvars.Context:
    """The context a run's task starts in: the caller's, but never a request's database thread.
    A REST request runs its sync middleware in a thread of its own and the async view through
    AsyncToSync, so a run it starts inherits that thread for every database call; the client
    may hang up (`curl -m 3`) and the thread goes with the request ("CurrentThreadExecutor
    already quit or is broken"). Such a run uses a thread of its own that never closes;
    runs started by a socket or the scheduler are left as they are (the shared thread)."""
    context = contextvars.copy_context()
    if context.run(_in_a_request):
        context.run(_use_the_runs_thread)
    return context


# asgiref gives every ThreadSensitiveContext one thread; this one is never exited.
_RUNS_THREAD = ThreadSensitiveContext()


def _in_a_request() -> bool:
    executors = getattr(AsyncToSync, "executors", None)
    return (getattr(executors, "current", None) is not None
            or SyncToAsync.thread_sensitive_context.get(None) is not None)


def _use_the_runs_thread() -> None:
    SyncToAsync.thread_sensitive_context.set(_RUNS_THREAD)
    AsyncToSync.executors.current = None


class RunActive(Exception):
    """A run is already active for this session."""


@dataclass
class Run:
    run_id: str
    session_id: str
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    frames: list[dict] = field(default_factory=list)
    seq: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    final_content: str | None = None
    error: str | None = None
    error_code: str = ""  # the error frame's code (agent.frames.events.ErrorEvent)
    stopped: bool = False
    shut_down: bool = False  # stopped by the server's shutdown, not by a person: interrupted
    answered: bool = False  # stream_end sent; only post-turn workers may still run
    context_tokens: int = 0
    sources: list = field(default_factory=list)  # the answer's (stream_end's), for the REST reply
    rewound: dict | None = None  # the history_rewound frame of an edit or regenerate
    publishing: bool = False  # the publisher task has frames in hand
    origin: str = ""  # who started it: "" a person in a chat, else the starter's word ("routine")
    taint: str = ""  # the untrusted content its instruction came from ("" when the owner's own)
    approval_timeout_s: float | None = None  # None: APPROVAL_TIMEOUT_S
    listeners: list = field(default_factory=list)  # callables given each published frame
    missed: bool = False  # a frame could not be sent (channel layer down): catch up when it is back
    sent_at: float = 0.0  # time.monotonic() of its last frame sent


async def claim_run(session_id: str, run_id: str) -> bool:
    return bool(await db_hop(_claim, session_id, run_id))  # one thread hop for both updates


def _claim(session_id: str, run_id: str) -> Session | bool:
    """The session as claimed for `run_id` (its row, read by the claim's own UPDATE where the
    database can return it, else True), or False when another live run holds it."""
    now = timezone.now()
    sid = hotsql.prep(Session, "id", session_id)
    assignments = "active_run_id = %s, active_run_heartbeat = %s"
    where = "id = %s AND (active_run_id = '' OR active_run_heartbeat < %s)"
    params = [run_id, hotsql.prep(Session, "active_run_heartbeat", now), sid,
              hotsql.prep(Session, "active_run_heartbeat", now - CLAIM_TTL)]
    rows = hotsql.update_returning(Session, assignments, where, params)
    if rows is None:
        claimed: Session | bool = hotsql.execute(f"UPDATE {hotsql.table(Session)} SET {assignments} WHERE {where}", params) == 1
    else:
        claimed = rows[0] if rows else False
    if not claimed:
        return False
    # We hold the claim, so no run of this session is alive: a `partial` row left by a dead
    # worker (crash in a multi-worker setup, voided by TTL) is interrupted, not streaming.
    hotsql.execute(
        f"UPDATE {hotsql.table(Message)} SET status = %s WHERE session_id = %s AND status = %s",
        [Message.Status.INTERRUPTED.value, sid, Message.Status.PARTIAL.value],
    )
    return claimed


async def active_run_id(session_id: str) -> str | None:
    """The id of the session's live run (in any process), or None."""
    return await db_hop(active_run_id_now, session_id)


def active_run_id_now(session_id: str) -> str | None:
    """`active_run_id` in the calling thread (sync)."""
    found = hotsql.select(Session, "id = %s", [hotsql.prep(Session, "id", session_id)])
    return live_run_id(found[0]) if found else None


def live_run_id(session: Session) -> str | None:
    """The id of the run holding the session's claim, unless the claim has lapsed."""
    if not session.active_run_id or session.active_run_heartbeat is None:
        return None
    if session.active_run_heartbeat < timezone.now() - CLAIM_TTL:
        return None
    return session.active_run_id


class RunManager:
    def __init__(self, agent=None) -> None:
        self._agent = agent
        self.layer = get_channel_layer()
        self.active: dict[str, Run] = {}  # by session id
        self.by_id: dict[str, Run] = {}  # active and recently finished, by run id
        self.channel: str | None = None
        self._listener: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self.start_gate = _StartGate()  # one per event loop, as the manager
        self._down_at = 0.0  # when this process last heard the channel layer went down

    @property
    def agent(self):
        if self._agent is None:

            self._agent = get_agent()
        return self._agent

    # --- starting and driving runs -----------------------------------------------------
    async def start(
        self,
        session_id: str,
        content: str,
        images: list[str] | None = None,
        *,
        planning: bool = True,
        mode: str = "message",
        message_id: int | None = None,
        origin: str = "",
        approval_timeout_s: float | None = None,
        listeners: list | None = None,
        taint: str = "",
    ) -> Run:
        """Start a run. mode "message" appends `content`; "edit" replaces user message
        `message_id` (and drops the turns after it) with `content`; "regenerate" answers the
        last user message again (`content` is ignored). Raises RunActive, or HistoryError when
        the edit or regenerate is refused (nothing changed then). `origin` (what tools see in
        `current_run_origin`), `approval_timeout_s` and `listeners` (called with each frame)
        are for runs nobody watches live; `taint`: the untrusted content `content` came from (the
        run starts tainted: agent.trust.approvals.RunGuard.start_tainted)."""
        session_id = str(session_id)
        run = Run(run_id=uuid.uuid4().hex, session_id=session_id, origin=origin, taint=taint,
                  approval_timeout_s=approval_timeout_s, listeners=list(listeners or []))
        begun = None
        if mode == "message":  # the claim and the turn's start in one thread hop
            claimed, begun = await db_hop(self._claim_and_begin, session_id, run.run_id, content, images)
        else:
            claimed = await claim_run(session_id, run.run_id)
        if not claimed and not await self._claim_after_answer(session_id, run.run_id):
            raise RunActive("a run is already active in this session; wait for it to finish or press Stop")
        if mode != "message":
            # Under the claim: no other run can append rows while the history is rewritten.
            try:
                content, images, removed, begun = await db_hop(
                    self._rewind_and_begin, session_id, run.run_id, mode, message_id, content, images
                )
            except Exception:
                await _release(session_id, run.run_id)
                raise
            run.rewound = {"type": "history_rewound", "mode": mode, "removed_ids": removed}
        await self._ensure_listening()
        with contextlib.suppress(LayerUnavailable):  # the layer joins it when it is back; the run goes on
            await self.layer.group_add(control_group(session_id), self.channel)
        self.active[session_id] = run
        self.by_id[run.run_id] = run
        run.task = asyncio.create_task(self._drive(run, content, images, planning, begun), name=f"run-{run.run_id}",
                                       context=_outside_the_request())
        self._tasks.add(run.task)
        run.task.add_done_callback(self._tasks.discard)
        metrics.run_started()
        return run

    def _rewind_and_begin(self, session_id: str, run_id: str, mode: str, message_id, content: str, images) -> tuple:
        """(content, images, removed ids, what `begin_turn` returned or raised) of an edit or a
        regenerate: the shown version is parked, the new user row appended and linked to its
        turn as its newest version, in one thread hop."""
        replayed, images, removed, link = _rewind(session_id, mode, message_id, images)
        content = content if replayed is None else replayed
        begin = getattr(self.agent, "begin_turn", None)
        if begin is None:
            return content, images, removed, None
        try:
            begun = begin(session_id, content, images, run_id)
        except Exception as exc:  # raised in the run, where it is reported as before
            begun = exc
        history.link_version(session_id, link)
        return content, images, removed, begun

    def _claim_and_begin(self, session_id: str, run_id: str, content: str, images) -> tuple[bool, object]:
        """(claimed, what the agent's `begin_turn` returned or raised): a turn's start costs one
        thread hop, not two. Without the claim nothing is begun; an agent without `begin_turn`
        begins in its run."""
        claimed = _claim(session_id, run_id)
        if not claimed:
            return False, None
        begin = getattr(self.agent, "begin_turn", None)
        if begin is None:
            return True, None
        try:  # the session row the claim read: the turn does not read it again
            return True, begin(session_id, content, images, run_id, session=claimed if isinstance(claimed, Session) else None)
        except Exception as exc:  # raised in the run, where it is reported as before
            return True, exc

    async def _claim_after_answer(self, session_id: str, run_id: str) -> bool:
        """The client may send as soon as it sees the run's last frame (stream_end, error or
        stream_stopped: the input is unlocked) while the run still finishes its bookkeeping or
        post-turn workers (compression): wait for it instead of refusing."""
        previous = self.active.get(session_id)
        if previous is not None:
            if not (previous.answered or previous.error or previous.stopped):
                return False
            await asyncio.shield(previous.done.wait())
            return await claim_run(session_id, run_id)
        for _ in range(15):  # another worker's run may be finishing the same way
            await asyncio.sleep(0.1)
            if await claim_run(session_id, run_id):
                return True
        return False

    async def _drive(self, run: Run, content: str, images: list[str] | None, planning: bool, begun=None) -> None:
        await self.start_gate.enter()
        current_stop_event.set(run.stop_event)
        current_run_id.set(run.run_id)
        current_run_origin.set(run.origin)
        current_run_taint.set(run.taint)
        current_approval_timeout_s.set(run.approval_timeout_s)
        bind_run(run.run_id, run.session_id)  # every log line of the run carries its ids
        heartbeat = asyncio.create_task(self._heartbeat(run))
        outbox = metrics.RelayQueue()  # observes the relay lag
        publisher = asyncio.create_task(self._publisher(run, outbox))
        if run.rewound:
            outbox.put_nowait(run.rewound)
        try:
            stream = (self.agent.run_stream(run.session_id, content, images, planning=planning, begun=begun)
                      if begun is not None else self.agent.run_stream(run.session_id, content, images, planning=planning))
            async for event in stream:
                frame = to_frame(event)
                if frame["type"] == "stream_end":
                    run.answered = True
                    run.final_content = frame["content"]
                    run.context_tokens = frame.get("context_tokens", 0)
                    run.sources = frame.get("sources") or []
                elif frame["type"] == "error":
                    run.error, run.error_code = frame["message"], frame.get("code", "internal")
                elif frame["type"] == "stream_stopped":
                    run.stopped = True
                await self._emit(run, outbox, frame)
        except Exception as exc:
            log.exception("run %s failed", run.run_id)
            run.error = server_paths(f"the run failed: {type(exc).__name__}: {exc}. The session is intact; send the message again.")
            run.error_code = "internal"
            outbox.put_nowait(to_frame(ErrorEvent(run.error)))
        finally:
            outbox.put_nowait(None)
            await publisher  # every frame is out before the claim is released
            heartbeat.cancel()
            await _record_outcome(run)
            metrics.run_finished(run)
            await _release(run.session_id, run.run_id)
            if self.active.get(run.session_id) is run:
                del self.active[run.session_id]
            run.done.set()
            notices.run_finished(run.session_id, answer=run.final_content, error=run.error, stopped=run.stopped,
                                 origin=run.origin)
            self._later(KEEP_FINISHED_S, lambda: self._forget(run))

    async def _emit(self, run: Run, outbox: metrics.RelayQueue, frame: dict) -> None:
        """Publish `frame` at once when nothing is waiting to go out before it (the usual case:
        one trip through the event loop less per delta than handing it to the publisher), else
        queue it behind the others for the publisher, which merges waiting deltas."""
        if run.publishing or not outbox.empty():
            outbox.put_nowait(frame)
            return
        outbox.observe_direct()
        await self._publish_logged(run, frame)

    async def _publisher(self, run: Run, outbox: asyncio.Queue) -> None:
        """Publish the queued frames in order. When the relay falls behind the model, the deltas
        already waiting are merged into one frame, so lag stays bounded and nothing is lost."""
        while True:
            run.publishing = False
            batch = [await outbox.get()]
            run.publishing = True
            while not outbox.empty():
                batch.append(outbox.get_nowait())
            for frame in merge_deltas(batch):
                if frame is None:
                    return
                await self._publish_logged(run, frame)

    async def _publish_logged(self, run: Run, frame: dict) -> None:
        try:
            await self.publish(run, frame)
        except LayerUnavailable:
            run.missed = True  # kept in the run's buffer; the layer logged the outage once
        except Exception:
            log.exception("run %s: publishing a %s frame failed", run.run_id, frame.get("type"))

    async def publish(self, run: Run, frame: dict) -> None:
        """Number the frame, keep it for replays and send it; nobody changes it after this (the
        in-memory layer relies on that and does not copy it)."""
        run.seq += 1
        frame["run_id"] = run.run_id
        frame["seq"] = run.seq
        run.frames.append(frame)
        run.sent_at = time.monotonic()
        for listener in run.listeners:
            try:
                listener(run, frame)
            except Exception:
                log.exception("run %s: a frame listener failed", run.run_id)
        await self.layer.group_send(frames_group(run.session_id), run_event(frame))

    async def _heartbeat(self, run: Run) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            await db_hop(
                hotsql.execute,
                f"UPDATE {hotsql.table(Session)} SET active_run_heartbeat = %s WHERE id = %s AND active_run_id = %s",
                [hotsql.prep(Session, "active_run_heartbeat", timezone.now()), hotsql.prep(Session, "id", run.session_id), run.run_id],
            )

    async def _forget(self, run: Run) -> None:
        self.by_id.pop(run.run_id, None)
        if run.session_id not in self.active:
            await self.layer.group_discard(control_group(run.session_id), self.channel)

    def _later(self, delay: float, make_coro) -> None:
        async def waiter() -> None:
            await asyncio.sleep(delay)
            await make_coro()

        task = asyncio.create_task(waiter())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- stop and replay, from any process -------------------------------------------------
    async def request_stop(self, session_id: str) -> bool:
        """Ask the owner of the session's run to stop it. False when no run is active."""
        session_id = str(session_id)
        run = self.active.get(session_id)
        if run is not None and (run.stopped or run.error):
            return False  # it already ended (stream_stopped / error sent); only its bookkeeping is left
        if run is not None:
            run.stop_event.set()
            return True
        if await active_run_id(session_id) is None:
            return False
        await self.layer.group_send(control_group(session_id), {"type": "run.stop", "session_id": session_id})
        return True

    async def _ensure_listening(self) -> None:
        if self._listener is None or self._listener.done():
            # The default prefix on purpose: channels_redis serves every process-local channel
            # from ONE real channel per prefix under one shared lock, so a second prefix would
            # make this listener and the sockets starve each other (frames stuck for seconds).
            self.channel = await self.layer.new_channel()
            notices.set_reply_channel(self.channel)  # sockets answer presence pings here
            self._listener = asyncio.create_task(self._listen(), name="run-manager-listener")

    async def _listen(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("run manager: channel layer receive failed; retrying")
                await asyncio.sleep(1)
                continue
            try:
                await self._handle(message)
            except LayerUnavailable:
                pass  # an answer that cannot go out now; the layer logged the outage once
            except Exception:
                log.exception("run manager: bad control message %r", message.get("type"))

    async def _handle(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "run.stop":
            run = self.active.get(str(message.get("session_id")))
            if run is not None:
                run.stop_event.set()
        elif kind == "run.approval":
            approvals.wake(str(message.get("approval_id")), str(message.get("decision")))
        elif kind == "run.presence":
            notices.pong(str(message.get("ping_id")))
        elif kind == "layer.down":
            self._down_at = time.monotonic()
        elif kind == "layer.up":
            await self._catch_up()
        elif kind == "run.replay_request":
            run = self.by_id.get(message.get("run_id") or "") or self.active.get(str(message.get("session_id")))
            if run is None or run.session_id != str(message.get("session_id")):
                return
            after = int(message.get("after_seq") or 0)
            await self.layer.send(
                message["reply_to"],
                {
                    "type": "run.replay",
                    "run_id": run.run_id,
                    "frames": [f for f in run.frames if f["seq"] > after],
                    "finished": run.done.is_set(),
                },
            )

    async def _catch_up(self) -> None:
        """After a channel-layer outage: each run that could not send a frame sends all of its
        frames to its chat's sockets (`run.catchup`); each socket keeps the ones it lacks."""
        # Frames sent just before the outage was noticed may have died with Redis too.
        recent = self._down_at - LOST_BEFORE_OUTAGE_S
        for run in list(self.by_id.values()):
            if not run.missed and run.sent_at < recent:
                continue
            run.missed = False
            try:
                await self.layer.group_send(frames_group(run.session_id),
                                            {"type": "run.catchup", "run_id": run.run_id, "frames": list(run.frames)})
            except LayerUnavailable:
                run.missed = True  # down again: the next layer.up tries again
                return

    async def shutdown(self) -> None:
        """Stop every run cleanly (stop event, not cancel) and end background tasks."""
        for run in list(self.active.values()):
            run.shut_down = True
            run.stop_event.set()
        runs = [r.task for r in self.active.values() if r.task]
        if runs:
            await asyncio.wait(runs, timeout=5)
        for task in list(self._tasks) + ([self._listener] if self._listener else []):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await notices.shutdown()


async def _release(session_id: str, run_id: str) -> None:
    await db_hop(_release_now, session_id, run_id)


def _release_now(session_id: str, run_id: str) -> None:
    hotsql.execute(
        f"UPDATE {hotsql.table(Session)} SET active_run_id = '', active_run_heartbeat = NULL"
        " WHERE id = %s AND active_run_id = %s",
        [hotsql.prep(Session, "id", session_id), run_id],
    )


def _rewind(session_id: str, mode: str, message_id, images) -> tuple[str | None, list[str], list[int], history.VersionLink]:
    """(content, images, removed ids, version link) of the run that replaces the end of the history."""

    if mode == "edit":
        kept_images, removed, link = history.rewind_for_edit(session_id, history.parse_message_id(message_id))
        return None, images or kept_images, removed, link
    if mode == "regenerate":
        return history.rewind_for_regenerate(session_id)
    raise ValueError(f"unknown run mode {mode!r}")


async def _record_outcome(run: Run) -> None:
    """An error, or a stop before the answer, stays in the history as a display-only row, so a
    reload shows what the live view showed."""

    try:
        if run.error:
            await db_hop(history.add_marker, run.session_id, "error", run.error)
        elif run.stopped and not run.answered and run.shut_down:
            await db_hop(history.add_marker, run.session_id, "error", SHUT_DOWN_TEXT)
        elif run.stopped and not run.answered:
            await db_hop(history.add_marker, run.session_id, "stopped", history.STOPPED_TEXT)
    except Exception:
        log.exception("run %s: recording its outcome failed", run.run_id)


class _StartGate:
    """At most PER_TURN runs take their first step (the context, the request: ~1 ms on the event
    loop each) in one turn of the event loop; the rest wait, in order, for a later turn, after
    the I/O polled in between. Twenty runs started at once held every stream in flight for
    ~20 ms in one turn; now the streams' deltas go out between the starts (bench/README, sixth
    session: part (f) alone, p99 median ~17 -> ~13 ms). A start on a quiet server passes at
    once, without a turn."""

    PER_TURN = 2

    def __init__(self) -> None:
        self.taken = 0
        self.turn_due = False
        self.waiting: collections.deque[asyncio.Future] = collections.deque()

    async def enter(self) -> None:
        if self.taken < self.PER_TURN and not self.waiting:
            self._take()
            return
        ticket = asyncio.get_running_loop().create_future()
        self.waiting.append(ticket)
        try:
            await ticket  # its slot is taken for it when it is let in
        except asyncio.CancelledError:
            with contextlib.suppress(ValueError):
                self.waiting.remove(ticket)
            raise

    def _take(self) -> None:
        self.taken += 1
        if not self.turn_due:
            self.turn_due = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self.taken, self.turn_due = 0, False
        if self.waiting:  # a timer, so the turn's I/O callbacks run first
            asyncio.get_running_loop().call_later(0, self._let_in)

    def _let_in(self) -> None:
        while self.waiting and self.taken < self.PER_TURN:
            ticket = self.waiting.popleft()
            if not ticket.done():
                ticket.set_result(None)
                self._take()


_managers: dict[int, RunManager] = {}


def get_run_manager() -> RunManager:
    """The run manager of the running event loop (one per process in production)."""
    loop = asyncio.get_running_loop()
    manager = _managers.get(id(loop))
    if manager is None or getattr(manager, "_loop", None) is not loop:
        manager = RunManager()
        manager._loop = loop
        _managers[id(loop)] = manager
    return manager


def merge_deltas(frames: list[dict | None]) -> list[dict | None]:
    """Consecutive stream_delta (or thinking_delta) frames become one with the joined text."""
    merged: list[dict | None] = []
    for frame in frames:
        last = merged[-1] if merged else None
        if (
            frame is not None
            and last is not None
            and frame["type"] == last["type"]
            and frame["type"] in ("stream_delta", "thinking_delta")
            and frame.get("is_subagent") == last.get("is_subagent")  # a sub-agent's text is its card's
        ):
            last["delta"] += frame["delta"]
        else:
            merged.append(frame)
    return merged


def recover_after_crash() -> int:
    """On server start: void dead claims and mark answers left `partial` as `interrupted`.

    Without REDIS_URL this process is the only worker (in-memory layer), so every claim is dead.
    With Redis, rows of sessions whose run is still alive (another worker's fresh heartbeat)
    are left alone; `claim_run` tidies them up when the claim is next taken over.
    """
    stale = timezone.now() - (CLAIM_TTL if settings.REDIS_URL else timedelta(0))
    Session.objects.exclude(active_run_id="").filter(
        Q(active_run_heartbeat__isnull=True) | Q(active_run_heartbeat__lt=stale)
    ).update(active_run_id="", active_run_heartbeat=None)
    live = Session.objects.exclude(active_run_id="").values("pk")
    return Message.objects.filter(status=Message.Status.PARTIAL).exclude(session__in=live).update(
        status=Message.Status.INTERRUPTED
    )
