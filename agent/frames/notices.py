"""Notifications to the owner's devices (notify_app) when a chat needs them and nobody looks:
an answer finished, or an approval waits, while no tab has that chat open.

"No tab open" is asked of the sockets themselves, across every worker: a `presence.ping` to
the chat's group, which every SessionConsumer on it answers (`run.presence`, back to the run
manager's channel). No answer within PRESENCE_WAIT_S = nobody looks. Nothing of this runs per
delta: at a run's end or an approval, a few attribute checks, then (off the run's path) one
cached owner lookup, one cached "has targets?" and — only for owners with targets — the ping.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import uuid

from channels.layers import get_channel_layer

from agent.frames.groups import frames_group
from navi_project.redis_layer import LayerUnavailable
from notify_app.delivery import has_targets, notify_user
from sessions_app.models import Session
from tools_app.context import current_run_origin

log = logging.getLogger(__name__)
PRESENCE_WAIT_S = 1.0  # a socket answers in milliseconds, even through Redis
PREVIEW_CHARS = 160
OWNERS_KEPT = 4096

_reply_channel: str | None = None  # the run manager's channel (it routes `run.presence` here)
_pongs: dict[str, asyncio.Future] = {}
_owners: collections.OrderedDict[str, int] = collections.OrderedDict()  # session id → owner id
_tasks: set[asyncio.Task] = set()
_left_to_caller: set[str] = set()  # chats whose caller notifies the owner itself (a routine)


def leave_to_caller(session_id: str) -> None:
    """The next run of this chat notifies through its caller (routines_app sends its own message):
    no "answered" or "approval" notification from here until that run ends."""
    _left_to_caller.add(str(session_id))


def set_reply_channel(channel: str | None) -> None:
    global _reply_channel
    _reply_channel = channel


def pong(ping_id: str) -> None:
    """A socket answered a presence ping (RunManager routes `run.presence` here)."""
    future = _pongs.get(ping_id)
    if future is not None and not future.done():
        future.set_result(True)


async def tab_open(session_id: str) -> bool:
    """Does any socket, in any worker, have this chat open?"""
    if _reply_channel is None:
        return False
    ping_id = uuid.uuid4().hex
    future = asyncio.get_running_loop().create_future()
    _pongs[ping_id] = future
    try:
        await get_channel_layer().group_send(
            frames_group(session_id), {"type": "presence.ping", "ping_id": ping_id, "reply_to": _reply_channel}
        )
        await asyncio.wait_for(future, PRESENCE_WAIT_S)
        return True
    except (TimeoutError, LayerUnavailable):  # nobody answered, or nobody can be asked (Redis down)
        return False
    finally:
        _pongs.pop(ping_id, None)


async def _owner_of(session_id: str) -> int | None:
    """Sessions never change owner: one query per chat per process."""
    if session_id in _owners:
        _owners.move_to_end(session_id)
        return _owners[session_id]
    owner = await Session.objects.filter(pk=session_id).values_list("owner_id", flat=True).afirst()
    if owner is not None:
        _owners[session_id] = owner
        if len(_owners) > OWNERS_KEPT:
            _owners.popitem(last=False)
    return owner


async def _notify_unwatched(session_id: str, owner_id: int | None, **note: str) -> None:
    try:
        owner_id = owner_id or await _owner_of(session_id)
        if owner_id is None or not await has_targets(owner_id):
            return
        if await tab_open(session_id):  # the lines say why a push came or did not
            log.info("chat %s: %r not notified: a tab shows the chat", session_id, note["title"])
            return
        results = await notify_user(owner_id, url=f"/#{session_id}", **note)
        sent = sum(r["ok"] for r in results)
        log.info("chat %s: %r notified to %d of %d targets", session_id, note["title"], sent, len(results))
    except Exception:
        log.exception("notifying the owner of chat %s failed", session_id)


def _spawn(coro) -> None:
    # A fresh context: a run started by a REST request carries that request's asgiref
    # thread-sensitive executor, which is gone once the response is sent (the ORM would fail).
    task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


def _preview(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def run_finished(session_id: str, *, answer: str | None, error: str | None, stopped: bool, origin: str = "") -> None:
    """At a run's end (not stopped by the owner): an answer or an error nobody saw gets a
    notification. A run with an `origin` (a routine) is reported by its starter, once."""
    if str(session_id) in _left_to_caller:
        _left_to_caller.discard(str(session_id))
        return
    if origin or stopped or (answer is None and not error) or str(session_id).startswith("subagent_"):
        return
    if error:
        note = {"title": "Navi could not answer", "body": _preview(error)}
    else:
        note = {"title": "Navi answered", "body": _preview(answer) or "The answer is ready."}
    _spawn(_notify_unwatched(str(session_id), None, tag=f"navi-chat-{session_id}", **note))


def approval_waiting(session_id: str, user_id: int | None, tool: str, reason: str) -> None:
    """A tool call waits for the owner's approval; tell them if no tab shows the chat (a run
    with an origin, e.g. a routine's, tells them through its starter)."""
    if str(session_id) in _left_to_caller or current_run_origin.get():
        return
    body = f"'{tool}' waits for your approval" + (f": {reason}" if reason else "")
    _spawn(
        _notify_unwatched(
            str(session_id),
            user_id,
            title="Navi needs your approval",
            body=_preview(body),
            tag=f"navi-approval-{session_id}",
        )
    )


async def drain() -> None:
    """Wait for the notifications in flight (tests; a clean stop)."""
    while _tasks:
        await asyncio.gather(*list(_tasks), return_exceptions=True)


async def shutdown() -> None:
    """End the notifications still in flight (the process is stopping)."""
    for task in list(_tasks):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
