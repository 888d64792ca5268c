"""One thread hop for the hot path's database work: `await db_hop(func, *args)`.

What `sync_to_async(func)(*args)` does for a thread-sensitive call, in the same thread (so on
the same database connection), with less around it: asgiref copies the context and then
re-homes it on both sides of every call (`_restore_context`, walking every context variable),
and wraps the call in four partials. On the 2-vCPU VM a round trip took ~200 us through asgiref
and ~125 us this way; a run makes eight to ten of them (claim and turn start, partial and final
saves, token count, LLM-call records, release). `bench/README.md` has the figures.

For functions that only touch the database (and read context variables): changes they make to
context variables stay in the thread, as with `loop.run_in_executor`. Whenever asgiref would
pick another thread than its single shared one (under `async_to_sync`, or in a request's
ThreadSensitiveContext), the call goes through asgiref itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from typing import Any, Callable, TypeVar

from asgiref.sync import AsyncToSync, SyncToAsync, sync_to_async

T = TypeVar("T")


def _shared_executor(loop: asyncio.AbstractEventLoop):
    """asgiref's single thread, when asgiref itself would run a thread-sensitive call there."""
    if getattr(getattr(AsyncToSync, "executors", None), "current", None) is not None:
        return None
    sensitive = getattr(SyncToAsync, "thread_sensitive_context", None)
    if sensitive is None or sensitive.get(None) is not None:
        return None
    if loop in getattr(AsyncToSync, "loop_thread_executors", {loop: None}):
        return None
    return getattr(SyncToAsync, "single_thread_executor", None)


async def db_hop(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    executor = _shared_executor(loop)
    if executor is None:
        return await sync_to_async(func)(*args, **kwargs)
    call = functools.partial(func, *args, **kwargs) if kwargs else func
    future = loop.run_in_executor(executor, contextvars.copy_context().run, call, *(() if kwargs else args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        # The thread cannot be stopped: as asgiref, let it finish before the caller goes on (a
        # release must not overtake the claim it undoes).
        if not future.done():
            try:
                await future
            except BaseException:
                pass
        raise
