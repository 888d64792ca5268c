"""The byte caps on what an MCP server sends (MCP_MAX_RESPONSE_MB), enforced while it streams:
an HTTP body, one SSE event, one stdio line. A server that passes the cap gets a clear tool
error, never the memory of the process. Also the stdio transport that watches its process."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import anyio
from django.conf import settings

log = logging.getLogger(__name__)

MARKER = "over Navi's MCP answer limit"
CONNECTION_CLOSED = -32000
TOO_LARGE = -32001  # an implementation-defined JSON-RPC server-error code
STOP_GRACE_S = 2.0
# A JSON-RPC answer's id, read from the start of a line too long to parse.
ID_RE = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')


def max_response_bytes() -> int:
    return max(1, int(getattr(settings, "MCP_MAX_RESPONSE_MB", 8))) * 1024 * 1024


def too_large_text(limit: int) -> str:
    return (f"the answer was {MARKER} of {limit // (1024 * 1024)} MB (MCP_MAX_RESPONSE_MB) and was "
            "dropped while it arrived")


def is_too_large(text: str) -> bool:
    return MARKER in text or "byte limit" in text  # ours, or the SDK's SSE event limit


# --- HTTP ---------------------------------------------------------------------------------------
def capped_response(response: Any, limit: int) -> Any:
    """The response with its body counted as it streams; a JSON body past `limit` raises
    (the SDK turns the error into the request's JSON-RPC error). SSE bodies are long-lived
    streams of many events: the SDK's per-event limit (max_sse_event_size) caps those."""
    import httpx2

    if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
        return response
    inner = response.stream

    class TooLarge(httpx2.StreamError):
        pass

    class Capped(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in inner:
                seen += len(chunk)
                if seen > limit:
                    raise TooLarge(too_large_text(limit))
                yield chunk

        async def aclose(self) -> None:
            await inner.aclose()

    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        async def refuse() -> AsyncIterator[bytes]:
            raise TooLarge(too_large_text(limit))
            yield b""  # pragma: no cover - makes this a generator

        class Refused(Capped):
            def __aiter__(self):
                return refuse()

        response.stream = Refused()
    else:
        response.stream = Capped()
    return response


# --- stdio --------------------------------------------------------------------------------------
@asynccontextmanager
async def stdio_transport(argv: list[str], env: dict[str, str], errlog: Any, *, limit: int,
                          on_exit: Callable[[int | None], None]) -> AsyncIterator[tuple[Any, Any]]:
    """Start `argv` in its own process group and speak newline-delimited JSON-RPC with it.
    A line longer than `limit` is skipped while it streams (its request gets an error);
    `on_exit(returncode)` is called when the program's stdout ends while Navi still uses it."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    process = await anyio.open_process(argv, stdin=-1, stdout=-1, stderr=errlog, env=env, cwd="/",
                                       start_new_session=True)
    read_writer, read_stream = anyio.create_memory_object_stream(0)
    write_stream, write_reader = anyio.create_memory_object_stream(0)
    closing = False

    def error_for(head: bytes) -> Any:
        found = ID_RE.search(head)
        if found is None:
            return None
        request_id = json.loads(found.group(1))
        error = types.ErrorData(code=TOO_LARGE, message=too_large_text(limit))
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))

    async def deliver(line: bytes) -> None:
        try:
            message = SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError as exc:
            log.info("MCP stdio server sent a line that is not JSON-RPC: %s", str(exc)[:200])
            return
        await read_writer.send(message)

    async def reader() -> None:
        buffer = bytearray()
        head = b""  # the start of a line past the limit (for its id); the rest is skipped
        skipping = False
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    while chunk:
                        newline = chunk.find(b"\n")
                        part, chunk = (chunk, b"") if newline < 0 else (chunk[:newline], chunk[newline + 1:])
                        if skipping:
                            if newline >= 0:
                                skipping = False
                                reply = error_for(head)
                                if reply is not None:
                                    await read_writer.send(reply)
                                else:
                                    log.warning("MCP stdio server sent a line over the limit with no id; dropped")
                            continue
                        buffer += part
                        if len(buffer) > limit:
                            head, skipping = bytes(buffer[:4096]), True
                            buffer = bytearray()
                            if newline >= 0:  # ended in this very chunk
                                chunk = b"\n" + chunk
                            continue
                        if newline >= 0:
                            line, buffer = bytes(buffer), bytearray()
                            if line.strip():
                                await deliver(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            pass
        finally:
            if not closing:
                with contextlib.suppress(Exception):
                    await process.wait()
                on_exit(process.returncode)

    async def writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            closing = True
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    with contextlib.suppress(Exception):
                        await stream.aclose()
            group.cancel_scope.cancel()


async def _stop(process: Any) -> None:
    """Close stdin, give the program STOP_GRACE_S to exit, then end its whole process group."""
    with contextlib.suppress(Exception):
        await process.stdin.aclose()
    with anyio.move_on_after(STOP_GRACE_S):
        await process.wait()
    if process.returncode is None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            with anyio.move_on_after(STOP_GRACE_S):
                await process.wait()
            if process.returncode is not None:
                break
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # what it left behind in its group
    with contextlib.suppress(Exception):
        await process.stdout.aclose()
