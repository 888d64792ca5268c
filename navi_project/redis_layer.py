"""channels_redis' layer, kept going through a Redis outage or restart.

Redis holds the groups (which sockets and run owners listen to a chat) only in memory: a
restarted Redis has none, and frames sent meanwhile are lost. Measured before this layer: a
`kill -9` of Redis crashed every open socket, each failed publish logged a traceback (11 MB in
10 s with 20 streams), and after the restart nobody answered a reconnecting socket's replay
request, because the run owner's control group was gone.

So this layer remembers the groups this process joined; the first failure marks the layer down
(one log line), and while it is down `send`/`group_send`/`group_add` fail at once with
`LayerUnavailable` (callers skip the frame: runs keep it in their buffer) and `receive` waits
instead of raising. A watchdog pings Redis twice a second; when it answers, every remembered
membership is added again, one line is logged, and each channel waiting in `receive` is handed
`{"type": "layer.down"}` when the outage starts and `{"type": "layer.up"}` when it is over, so
sockets can tell their page and ask for what they missed, and run owners can send it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from channels_redis.core import RedisChannelLayer
from redis import exceptions as redis_errors

log = logging.getLogger(__name__)

# What a dead, restarting or unreachable Redis raises (BusyLoadingError is a ConnectionError).
CONNECTION_ERRORS = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)
WATCH_INTERVAL_S = 0.5


class LayerUnavailable(ConnectionError):
    """The channel layer is down: nothing can be sent through it until it is back."""


class NaviRedisChannelLayer(RedisChannelLayer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.members: dict[str, set[str]] = collections.defaultdict(set)  # group -> this process's channels
        self.leaving: set[tuple[str, str]] = set()  # (group, channel) left while Redis was away
        self.down_since: float | None = None  # time.monotonic() of the outage's start
        self.down_reason = ""
        self.outages = 0  # numbered, so each channel hears of each outage once
        self._told: dict[str, int] = {}  # channel -> the outage it was told about (layer.down)
        self._changed: asyncio.Event | None = None
        self._watchdog: asyncio.Task | None = None

    # --- the state ----------------------------------------------------------------------------
    @property
    def is_down(self) -> bool:
        return self.down_since is not None

    def outage(self) -> str | None:
        """None while the layer works, else why it does not and for how long."""
        if self.down_since is None:
            return None
        return f"{self.down_reason} (for {time.monotonic() - self.down_since:.0f} s; live updates paused)"

    def _went_down(self, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            self.down_reason = f"Redis unreachable: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.outages += 1
            self._told.clear()  # entries of earlier outages mean nothing now
            log.warning("channel layer down (%s): live updates paused; runs go on and save their answers", self.down_reason)
            self._wake()
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watch(), name="channel-layer-watchdog")

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
        self._changed = None

    async def _state_change(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()

    async def _watch(self) -> None:
        """Until Redis answers and takes back every membership of this process."""
        while self.down_since is not None:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                for index in range(self.ring_size):
                    await self.connection(index).ping()
                groups = await self._rejoin()
            except CONNECTION_ERRORS:
                continue
            seconds = time.monotonic() - self.down_since
            self.down_since, self.down_reason = None, ""
            log.warning("channel layer back after %.1f s: %d group(s) joined again, live updates resumed", seconds, groups)
            self._wake()

    async def _rejoin(self) -> int:
        """Add every remembered membership again (a restarted Redis has none)."""
        now = time.time()
        by_index: dict[int, list[tuple[bytes, dict[str, float]]]] = collections.defaultdict(list)
        for group, channels in list(self.members.items()):
            if channels:
                by_index[self.consistent_hash(group)].append((self._group_key(group), {c: now for c in channels}))
        leaving, self.leaving = self.leaving, set()
        gone: dict[int, list[tuple[bytes, str]]] = collections.defaultdict(list)
        for group, channel in leaving:  # an unreachable Redis (not a restarted one) still has them
            gone[self.consistent_hash(group)].append((self._group_key(group), channel))
        try:
            for index in set(by_index) | set(gone):
                pipe = self.connection(index).pipeline(transaction=False)
                for key, mapping in by_index.get(index, []):
                    pipe.zadd(key, mapping)
                    pipe.expire(key, self.group_expiry)
                for key, channel in gone.get(index, []):
                    pipe.zrem(key, channel)
                await pipe.execute()
        except CONNECTION_ERRORS:
            self.leaving |= leaving
            raise
        return sum(len(entries) for entries in by_index.values())

    # --- the channel layer API --------------------------------------------------------------
    async def send(self, channel, message):
        self._refuse_while_down()
        try:
            return await super().send(channel, message)
        except CONNECTION_ERRORS as exc:
            self._went_down(exc)
            raise LayerUnavailable(self.down_reason) from exc

    async def group_send(self, group, message):
        self._refuse_while_down()
        try:
            return await super().group_send(group, message)
        except CONNECTION_ERRORS as exc:
            self._went_down(exc)
            raise LayerUnavailable(self.down_reason) from exc

    async def group_size(self, group: str) -> int:
        """How many channels are in `group` now, in any process (expired members left out)."""
        self._refuse_while_down()
        try:
            return await self.connection(self.consistent_hash(group)).zcount(
                self._group_key(group), int(time.time()) - self.group_expiry, "+inf")
        except CONNECTION_ERRORS as exc:
            self._went_down(exc)
            raise LayerUnavailable(self.down_reason) from exc

    async def group_add(self, group, channel):
        """Remembered first: if Redis cannot take it now, it is added when Redis is back."""
        self.members[group].add(channel)
        self.leaving.discard((group, channel))
        self._refuse_while_down()
        try:
            return await super().group_add(group, channel)
        except CONNECTION_ERRORS as exc:
            self._went_down(exc)
            raise LayerUnavailable(self.down_reason) from exc

    async def group_discard(self, group, channel):
        """Never raises for an outage: the membership is removed when Redis is back (a restarted
        one has forgotten it anyway)."""
        channels = self.members.get(group)
        if channels is not None:
            channels.discard(channel)
            if not channels:
                del self.members[group]
        if self.is_down:
            self.leaving.add((group, channel))
            return
        try:
            await super().group_discard(group, channel)
        except CONNECTION_ERRORS as exc:
            self.leaving.add((group, channel))
            self._went_down(exc)

    async def receive(self, channel):
        """The next message, or `layer.down` / `layer.up` when an outage starts or ends; a
        lost Redis is waited for, never raised."""
        while True:
            if self.is_down:
                if self._told.get(channel) != self.outages:
                    self._told[channel] = self.outages
                    return {"type": "layer.down"}
                await self._state_change()
                continue
            if self._told.pop(channel, None) is not None:
                return {"type": "layer.up"}
            try:
                return await super().receive(channel)
            except CONNECTION_ERRORS as exc:
                self._went_down(exc)

    def _refuse_while_down(self) -> None:
        if self.down_since is not None:
            raise LayerUnavailable(self.down_reason)
