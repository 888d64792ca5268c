"""navi_project.hop.db_hop: the hot path's thread hop runs where asgiref's would (so on the same
database connection), sees the caller's context, and a cancelled caller waits for the thread."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async

from navi_project.hop import db_hop

marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="")


async def test_it_runs_in_asgirefs_shared_thread_off_the_loop():
    here = threading.get_ident()
    there = await db_hop(threading.get_ident)
    assert there != here
    assert there == await sync_to_async(threading.get_ident)()


async def test_inside_a_request_context_it_uses_that_contexts_thread_as_asgiref_does():
    async with ThreadSensitiveContext():
        assert await db_hop(threading.get_ident) == await sync_to_async(threading.get_ident)()


async def test_arguments_context_and_errors_reach_across():
    marker.set("run-1")
    assert await db_hop(lambda a, b=0: (a, b, marker.get()), 1, b=2) == (1, 2, "run-1")

    def fails() -> None:
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        await db_hop(fails)


async def test_a_cancelled_caller_goes_on_only_after_the_thread_finished():
    started, finished = threading.Event(), threading.Event()

    def slow_write() -> None:
        started.set()
        time.sleep(0.3)
        finished.set()

    task = asyncio.create_task(db_hop(slow_write))
    await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished.is_set()  # what the caller does next cannot overtake the write
