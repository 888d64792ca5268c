"""Stop at every moment: race an LLM call (or any awaitable work) against the run's stop event.

The stop event was only looked at between streamed chunks, so a model that had not sent its
first byte yet, a planning call or a post-turn summary kept the run alive until it answered.
Here the call runs as its own task; when Stop wins, that task is cancelled, which unwinds the
backend's `async with` and closes the HTTP request (the model server stops generating).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Awaitable, TypeVar

T = TypeVar("T")


class Stopped(Exception):
    """The owner pressed Stop while the call was in flight; the call was cancelled."""


async def until_stopped(work: Awaitable[T], stop: asyncio.Event | None) -> T:
    """The result of `work`, or Stopped as soon as `stop` is set (the work is cancelled)."""
    if stop is None:
        return await work
    task = asyncio.ensure_future(work)
    if stop.is_set():
        await _cancel(task)
        raise Stopped
    stop_wait = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        await _cancel(task)
        raise
    finally:
        stop_wait.cancel()
    if task.done():
        return task.result()
    await _cancel(task)
    raise Stopped


async def stoppable(stream: AsyncIterator[T], stop: asyncio.Event | None) -> AsyncIterator[T]:
    """Iterate `stream`, raising Stopped as soon as `stop` is set, even while waiting for the
    next item (a model that has not sent a byte yet). The stream is closed either way.

    The items are read in the caller's task: a stop cancels that task only while it waits for
    the stream (the cancel unwinds the stream, which closes its connection), and the cancel
    becomes Stopped. One watcher per stream, nothing per item: a reader task of its own cost a
    trip through the event loop for every delta, which under load (runs starting beside the
    stream) is where a delta waited longest."""
    try:
        if stop is None:
            async for item in stream:
                yield item
            return
        task, waiting, woken = asyncio.current_task(), False, False

        def wake(_: asyncio.Future) -> None:
            nonlocal woken
            if waiting and not woken:
                woken = True
                task.cancel()  # interrupts only the wait for the next item below

        watcher = asyncio.ensure_future(stop.wait())
        watcher.add_done_callback(wake)
        try:
            while True:
                if stop.is_set():
                    raise Stopped
                waiting = True
                try:
                    item = await anext(stream)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if woken and task.uncancel() == 0:
                        raise Stopped from None
                    raise
                finally:
                    waiting = False
                yield item
        finally:
            watcher.cancel()
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


async def _cancel(task: asyncio.Future) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def raise_if_stopped(stop: asyncio.Event | None) -> None:
    """The loop's one stop check: Stopped when the owner has pressed Stop."""
    if stop is not None and stop.is_set():
        raise Stopped
