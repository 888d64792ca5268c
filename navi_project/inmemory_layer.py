"""The single-process channel layer (no REDIS_URL): Channels' in-memory layer, made cheap per message.

Channels' `InMemoryChannelLayer` scans every channel and group for expired entries on every
`group_send` and `receive`, starts a task per member for each `group_send` and deep-copies the
message once per member. A streamed answer sends one message per delta, so that overhead was
a large share of the server's CPU per delta. Here the scan runs at most once a second, a group
send puts the message straight into each member's queue, and the message is copied once per
send (members never mutate it), or not at all for a run's frames, which nobody changes once
published (agent.runs numbers a frame before it sends it). Expiry and capacity behave as before.

A socket in this process may also `attach` itself to its channel: a run's frame sent to one of
its groups is then handed to the socket by the sender's own task (`await receiver(message)`)
instead of waiting in a queue for the socket's task to wake, take it and dispatch it. That was
two trips through the event loop and a task per message, for every delta of every stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from copy import deepcopy
from typing import Awaitable, Callable

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

log = logging.getLogger(__name__)

CLEAN_INTERVAL_S = 1.0  # expiry is 60 s: a second of slack in noticing it changes nothing


IMMUTABLE = frozenset({"run.event"})  # agent.frames.groups.run_event: a published frame


def _copy(message: dict) -> dict:
    """What a receiver gets: a deep copy (as Channels gives), except for a run's frames: a deep
    copy of one cost ~10-40 us on this machine, for every delta of every stream."""
    return dict(message) if message.get("type") in IMMUTABLE else deepcopy(message)


class NaviInMemoryChannelLayer(InMemoryChannelLayer):
    _cleaned_at = 0.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # channel -> (the receiver, weakly: a socket that ends without detaching is not kept
        # alive by it; the event loop it runs on)
        self._attached: dict[str, tuple[weakref.WeakMethod, asyncio.AbstractEventLoop]] = {}

    def attach(self, channel: str, receiver: Callable[[dict], Awaitable[None]]) -> None:
        """Hand `channel`'s run frames sent to its groups (type run.event) to `receiver` (a
        bound async method) in the sending task, when it sends from the receiver's event loop;
        anything else still queues. The receiver keeps its own order (agent.web.consumers)."""
        self._attached[channel] = (weakref.WeakMethod(receiver), asyncio.get_running_loop())

    def detach(self, channel: str) -> None:
        self._attached.pop(channel, None)

    async def flush(self) -> None:
        self._attached.clear()
        await super().flush()

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._cleaned_at < CLEAN_INTERVAL_S:
            return
        self._cleaned_at = now
        super()._clean_expired()

    def _put(self, channel: str, message: dict, expires: float) -> None:
        queue = self.channels.get(channel)
        if queue is None:
            queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
        try:
            queue.put_nowait((expires, message))
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None

    async def send(self, channel: str, message: dict) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        assert "__asgi_channel__" not in message
        self._put(channel, _copy(message), time.time() + self.expiry)

    async def group_size(self, group: str) -> int:
        """How many channels are in `group` now (a replay request nobody would hear is not sent)."""
        self._clean_expired()
        return len(self.groups.get(group) or ())

    async def group_send(self, group: str, message: dict) -> None:
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        members = self.groups.get(group)
        if not members:
            return
        copy, expires = _copy(message), time.time() + self.expiry
        attached = self._attached if message.get("type") in IMMUTABLE else None
        loop = asyncio.get_running_loop()
        for channel in list(members):
            if attached and channel in attached:
                ref, receiver_loop = attached[channel]
                receiver = ref()
                if receiver is None:
                    attached.pop(channel, None)
                elif receiver_loop is loop:
                    try:
                        await receiver(copy)
                    except Exception:  # one socket's failure is not the sender's (a run's)
                        log.exception("delivering a frame to %s failed", channel)
                    continue
            try:
                self._put(channel, copy, expires)
            except ChannelFull:
                pass  # as Channels does: a full member misses it (the consumer repairs gaps)
