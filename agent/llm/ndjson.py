"""A lean reader for a streamed NDJSON reply (Ollama's /api/chat): each socket read gives every
complete line it holds at once.

Through httpx a stream of one-token lines costs four generator layers and an h11 event per
line, ~40 % of the server's CPU when it relays deltas (bench/README "The hot path"). Here one
read of the socket is decoded (chunked transfer or not) and split into lines in a few bytes
operations, so a reply that arrives faster than it is relayed is handled in batches.

Errors are raised as the httpx exceptions the backend already maps to what the owner reads
(connect failures, read timeouts, a dropped connection), and an HTTP error status as
`ollama.ResponseError`, exactly as the official client does. A redirect raises `Redirected`
before anything was read: the caller falls back to the client, which follows it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import ssl
import time
import weakref
from typing import AsyncIterator
from urllib.parse import urlsplit

import httpx
import orjson

from navi_project.lazy import lazy_module

ollama = lazy_module("ollama")  # only its ResponseError, for an error status

READ_SIZE = 256 * 1024
MAX_HEAD = 64 * 1024
MAX_ERROR_BODY = 1024 * 1024
MAX_JSON_BODY = 16 * 1024 * 1024
CONNECT_TIMEOUT_S = 5.0
_ssl_context: ssl.SSLContext | None = None


class Redirected(Exception):
    """The server answered with a redirect (nothing was read from the reply)."""


def _tls() -> ssl.SSLContext:
    global _ssl_context
    if _ssl_context is None:  # building one reads the system's CA store (milliseconds)
        _ssl_context = ssl.create_default_context()
    return _ssl_context


class _Chunked:
    """Decodes HTTP/1.1 chunked transfer coding fed in pieces of any size."""

    def __init__(self) -> None:
        self.buf = b""
        self.left = 0  # bytes of the current chunk still to come
        self.state = "size"  # size → data → crlf → size ... → trailer → done
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self.buf + data if self.buf else data
        if self.state == "size" and not self.done and (whole := self._whole_chunks(buf)) is not None:
            return whole
        i, out = 0, []
        while not self.done:
            if self.state == "size":
                # Whole chunks one after another (a streamed reply: a chunk per line), tightly;
                # anything else (extensions, a split chunk, the last chunk) the long way below.
                while (end := buf.find(b"\r\n", i)) >= 0:
                    try:
                        size = int(buf[i:end], 16)
                    except ValueError:
                        break
                    if size <= 0 or buf[end + 2 + size : end + 4 + size] != b"\r\n":
                        break
                    out.append(buf[end + 2 : end + 2 + size])
                    i = end + 4 + size
            if self.state == "data":
                piece = buf[i : i + self.left]
                out.append(piece)
                i += len(piece)
                self.left -= len(piece)
                if self.left:
                    break
                self.state = "crlf"
            elif self.state == "crlf":
                if len(buf) - i < 2:
                    break
                if buf[i : i + 2] != b"\r\n":
                    raise httpx.RemoteProtocolError("malformed chunked reply (no CRLF after a chunk)")
                i += 2
                self.state = "size"
            else:
                end = buf.find(b"\r\n", i)
                if end < 0:
                    if len(buf) - i > 4096:
                        raise httpx.RemoteProtocolError("malformed chunked reply (chunk header too long)")
                    break
                line, i = buf[i:end], end + 2
                if self.state == "trailer":
                    self.done = not line  # trailer fields until an empty line
                    continue
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                    if size < 0:
                        raise ValueError
                except ValueError:
                    raise httpx.RemoteProtocolError(f"malformed chunked reply (chunk size {line[:20]!r})") from None
                if size:
                    self.left, self.state = size, "data"
                else:
                    self.state = "trailer"
        self.buf = buf[i:]
        return b"".join(out)

    def _whole_chunks(self, buf: bytes) -> bytes | None:
        """The data of a buffer of whole chunks with no CRLF in their data (a streamed reply:
        a chunk per line), in a few C passes instead of a loop per chunk; None for anything
        else (extensions, the last chunk, a CRLF inside data: the first chunk that holds one
        comes out shorter than its size), which the loop in `feed` takes."""
        parts = buf.split(b"\r\n")
        pairs = (len(parts) - 1) // 2
        if not pairs:
            return None
        sizes, datas = parts[0 : 2 * pairs : 2], parts[1 : 2 * pairs : 2]
        try:
            sizes = list(map(int, sizes, itertools.repeat(16)))
        except ValueError:
            return None
        if sizes != list(map(len, datas)) or 0 in sizes:
            return None
        self.buf = b"\r\n".join(parts[2 * pairs :])  # a chunk begun, or its size: it comes whole later
        return b"".join(datas)


class _Sized:
    """A body of Content-Length bytes (or, with None, until the server closes)."""

    def __init__(self, length: int | None) -> None:
        self.left = length
        self.done = length == 0
        self.buf = b""  # bytes past the body (a server that sent more than it said)

    def feed(self, data: bytes) -> bytes:
        if self.left is None:
            return data
        data, extra = data[: self.left], data[self.left :]
        self.buf += extra
        self.left -= len(data)
        self.done = self.left == 0
        return data


def _request(method: str, url: str, body: bytes, headers: dict[str, str]) -> tuple[str, int, bool, bytes]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise httpx.UnsupportedProtocol(f"cannot read a stream from {url!r}")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}" + (f":{parts.port}" if parts.port else "")]
    for name, value in headers.items():
        if name.lower() not in ("host", "content-length", "connection", "transfer-encoding", "accept-encoding"):
            lines.append(f"{name}: {value}")
    lines += [f"Content-Length: {len(body)}", "", ""]  # HTTP/1.1: the connection may be kept
    return parts.hostname, port, tls, "\r\n".join(lines).encode("latin-1") + body


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        raise httpx.RemoteProtocolError(f"not an HTTP reply: {lines[0][:60]!r}") from None
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            fields[name.strip().lower()] = value.strip()
    return status, fields


def _body_decoder(fields: dict[str, str]):
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return _Chunked()
    length = fields.get("content-length")
    try:
        return _Sized(int(length) if length is not None else None)
    except ValueError:
        raise httpx.RemoteProtocolError(f"bad Content-Length {length!r}") from None


async def _read(reader: asyncio.StreamReader, timeout: float) -> bytes:
    if getattr(reader, "_buffer", None):  # already here: no timer to arm and cancel
        return await reader.read(READ_SIZE)
    try:
        async with asyncio.timeout(timeout):
            return await reader.read(READ_SIZE)
    except TimeoutError:
        raise httpx.ReadTimeout(f"nothing received for {timeout:g} s") from None


async def post_lines(
    url: str, payload: dict, headers: dict[str, str], read_timeout: float, keep_newlines: bool = False,
    pace: float = 0.0,
) -> AsyncIterator[list[bytes]]:
    """POST `payload` as JSON and yield the reply's non-empty lines, all that one read brought
    (`keep_newlines`: every piece of the body as it came, for a body read whole). With `pace`,
    batches are yielded at most that many seconds apart (see `_lines`).

    A reply read to its end leaves its connection open for the next request to the same server
    (a new TCP connection was ~1 ms of the time before the model saw a message); a reply closed
    early aborts its connection, which is how the server learns to stop generating."""
    host, port, tls, request = _request("POST", url, _body(payload), headers)
    key = (host, port, tls)
    kept = _idle_connection(key)
    reader, writer = kept or await _connect(host, port, tls)
    keep = False
    try:
        try:
            status, fields = await _send(reader, writer, request, read_timeout, kept is not None)
        except _StaleConnection:
            # The server closed a kept connection as we sent on it: it never saw the request.
            writer.transport.abort()
            reader, writer = await _connect(host, port, tls)
            status, fields = await _send(reader, writer, request, read_timeout, False)
        decoder = _body_decoder(fields)
        if 300 <= status < 400 and "location" in fields:
            raise Redirected(fields["location"])
        if status != 200:
            raise ollama.ResponseError(await _error_text(reader, decoder, read_timeout), status)
        async for lines in _lines(reader, decoder, read_timeout, keep_newlines, pace):
            yield lines
        # Kept only when the reply ended exactly where it said: bytes past it would be read
        # as the next request's reply.
        keep = (decoder.done and not decoder.buf and "close" not in fields.get("connection", "").lower()
                and not reader.at_eof())
    finally:
        if keep:
            _keep(key, reader, writer)
        else:
            writer.transport.abort()  # also stops generation at once


def _body(payload: dict) -> bytes:
    """The request as JSON: orjson encodes a request with every offered tool's schema in a
    fraction of json's time (it is built before each call, while the user waits); json still
    writes what orjson refuses (keys that are not text, integers past 64 bits)."""
    try:
        return orjson.dumps(payload)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(payload).encode()


class _StaleConnection(Exception):
    """A kept connection turned out closed before any byte of the reply."""


async def _connect(host: str, port: int, tls: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port, ssl=_tls() if tls else None, limit=MAX_HEAD)
    except (OSError, TimeoutError) as exc:
        raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from None
    return reader, writer


async def _send(reader, writer, request: bytes, read_timeout: float, kept: bool) -> tuple[int, dict[str, str]]:
    """Send the request and read the reply's head; on a `kept` connection that the server had
    closed meanwhile, _StaleConnection, so the caller tries once on a new one."""
    try:
        writer.write(request)
        async with asyncio.timeout(read_timeout):
            return _head((await reader.readuntil(b"\r\n\r\n"))[:-4])
    except TimeoutError:
        raise httpx.ReadTimeout(f"no reply head within {read_timeout:g} s") from None
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        if kept and (not isinstance(exc, asyncio.IncompleteReadError) or not exc.partial):
            raise _StaleConnection from None
        raise httpx.RemoteProtocolError(f"the server closed or garbled the reply head ({type(exc).__name__})") from None
    except asyncio.LimitOverrunError as exc:
        raise httpx.RemoteProtocolError(f"the server closed or garbled the reply head ({type(exc).__name__})") from None


# Connections kept after a complete reply: per event loop, per (host, port, tls), newest last.
_pools: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()
KEEP_IDLE_S = 30.0
KEEP_MAX = 32  # idle connections kept per server: one per stream of a busy server (20 at once in the bench)


def _keep(key: tuple, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    idle = _pools.setdefault(asyncio.get_running_loop(), {}).setdefault(key, [])
    idle.append((time.monotonic(), reader, writer))
    while len(idle) > KEEP_MAX:
        idle.pop(0)[2].transport.abort()


def _idle_connection(key: tuple) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The newest kept connection to `key` still open and not idle too long, if any."""
    idle = _pools.get(asyncio.get_running_loop(), {}).get(key) or []
    while idle:
        since, reader, writer = idle.pop()
        unasked = len(getattr(reader, "_buffer", b""))  # the server sent something while idle
        if time.monotonic() - since < KEEP_IDLE_S and not unasked and not reader.at_eof() and not writer.transport.is_closing():
            return reader, writer
        writer.transport.abort()
    return None


async def post_json(url: str, payload: dict, headers: dict[str, str], read_timeout: float, limit: int = MAX_JSON_BODY) -> object:
    """POST `payload` as JSON and return the reply's JSON body (a short, non-streamed reply,
    e.g. /api/show); errors as for `post_lines`, a body over `limit` bytes as ValueError."""
    body = b""
    async for lines in post_lines(url, payload, headers, read_timeout, keep_newlines=True):
        body += b"".join(lines)
        if len(body) > limit:
            raise ValueError(f"the reply is larger than {limit} bytes")
    return json.loads(body)


async def _lines(
    reader: asyncio.StreamReader, decoder, timeout: float, raw: bool = False, pace: float = 0.0
) -> AsyncIterator[list[bytes]]:
    """The reply's lines, a batch per read: every line is read the moment it arrives, and lines
    that arrived while the process was busy come together (one frame for all of them).

    With `pace`: while lines come sooner than `pace` seconds after the batch before them, the
    stream is "fast". Only while TICK_STREAMS streams of the event loop or more are fast at once
    (a busy server: each line read alone would cost a wake-up and a frame, ~4x the CPU) is a fast
    stream's socket left unread between the pace's ticks, so the lines that came meanwhile are
    read, and relayed, together. On a plain TCP connection it is read on the ticks every fast
    stream of the event loop shares (`_Ticks`): one wake-up of the process reads them all, and a
    stream with nothing new costs no wake-up at all. A stream quiet for QUIET_TICKS ticks is read
    the moment a line arrives again, as is every line of a model slower than `pace` per token: it
    never waits on a tick (and a tick that finds a single line takes the stream off the ticks).
    Over TLS the socket is left unread until `pace` has passed since the last batch (`_hold`)."""
    pending, loop = b"", asyncio.get_running_loop()
    last, fast = None, False  # when the last batch went out; whether lines come faster than pace
    seen = None  # when the last batch arrived, if read as it came (a tick's batch: unknown)
    fd = _plain_fd(reader) if pace else None
    ticks, paused = (_Ticks.of(loop, pace) if pace else None), False
    counted = False  # this stream is among the loop's fast streams (ticks.fast)
    try:
        while not decoder.done:
            if fast != counted:
                ticks.fast += 1 if fast else -1
                counted = fast
            held = fast and ticks.fast >= TICK_STREAMS  # a busy loop: fast streams are read together
            data, ticked, first_tick = None, False, False
            if held and fd is not None and not reader._buffer and not reader.at_eof():
                if not paused:
                    reader._transport.pause_reading()
                    paused = first_tick = True
                    ticks.streams += 1
                data = await ticks.read(fd, last + QUIET_TICKS * pace)
                fast = ticked = data is not None  # None: quiet for a while, so read as lines come
            elif held and fd is None and (wait := last + pace - loop.time()) > 0:
                await _hold(reader, wait)
            if data is None:
                if paused:
                    paused = False
                    ticks.streams -= 1
                    reader._transport.resume_reading()
                asked = loop.time()
                try:
                    data = await _read(reader, timeout)
                except ConnectionError as exc:
                    raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from None
                if pace and seen is not None:
                    now = loop.time()
                    fast = now - asked < pace / 2 if fast else now - seen < pace
            if not data:
                if isinstance(decoder, _Sized) and decoder.left is None:
                    break  # a reply delimited by the server closing
                raise httpx.RemoteProtocolError("the server closed the connection mid-reply")
            pending += decoder.feed(data)
            if raw:
                pending, piece = b"", pending
                yield [piece]
                continue
            if b"\n" in pending:
                *complete, pending = pending.split(b"\n")
                lines = [line for line in complete if line.strip()]
                if ticked and len(lines) < 2 and not first_tick:
                    # One line in a pace or more is a slow stream (e.g. one that looked fast only
                    # because a stall of this process let its lines pile up): its lines are read
                    # as they come again, not held for the next tick, until two of them come
                    # sooner than the pace (a tick's line may have waited there: not a measure).
                    # (The first tick after going fast may come at once: its one line says nothing.)
                    fast = False
                if lines:
                    last = loop.time()
                    seen = None if ticked else last
                    yield lines
    finally:
        if counted:
            ticks.fast -= 1
        if paused:
            ticks.streams -= 1
            if not reader._transport.is_closing():
                reader._transport.resume_reading()  # a kept connection reads as any other
    if pending.strip():
        yield [pending]


QUIET_TICKS = 6  # a fast stream with nothing new for this many paces is read as lines come again
# Fast streams at once before any is read on the ticks: fewer are read line by line, every piece
# relayed the moment it comes (bench/README, issue 58: 20 streams of a line every 10 ms cost
# ~105 us of CPU a line read as they come, ~25 us on the ticks; 5 such streams ~10 % more CPU
# read as they come, their lag p50 ~3.5 -> ~0.5 ms: a tick held every piece of a fast stream, a
# step's answer too, up to a pace).
TICK_STREAMS = 8
# A busy loop reads its fast streams on ticks further apart: (streams at once, pace multiple).
# Each frame costs about the same CPU whatever it carries (a read, a parse, a WebSocket write,
# a wake-up of the client), so under load fewer, fuller frames keep the server's CPU per delta
# down (bench/README, fifth session: 20 streams, 16 -> 32 -> 48 ms: ~34 -> ~16 -> ~13 us of
# CPU per delta). With TICK_STREAMS (8) fast streams at once they get 30 frames a second, 16 or
# more 20, which still reads as smooth text (the pace itself, 60 a second, only below that).
BUSY_STEPS = ((16, 3), (8, 2))
TICK_READ_SIZE = 64 * 1024  # os.read allocates what it may read: a tick's lines are a few KiB


def _plain_fd(reader: asyncio.StreamReader) -> int | None:
    """The socket's descriptor when the reply comes over plain TCP (not TLS), else None."""
    transport = reader._transport
    if transport.get_extra_info("sslcontext") is not None:
        return None
    sock = transport.get_extra_info("socket")
    return sock.fileno() if sock is not None else None


class _Ticks:
    """The pace's ticks of one event loop, shared by its fast streams.

    A waiting stream's transport is paused (its socket out of the loop's selector), so lines
    arriving between ticks wake nobody. On each tick one callback reads every waiting socket
    without blocking and wakes only the streams that got something: twenty streams at full
    speed cost one wake-up of the process per tick, not one per stream and read. Ticks fall on
    multiples of the interval on the loop's clock, so every stream waits on the same ones; the
    interval is the pace, or a multiple of it while many streams are fast (BUSY_STEPS)."""

    _of: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, _Ticks]]" = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop, pace: float) -> "_Ticks":
        by_pace = cls._of.setdefault(loop, {})
        if pace not in by_pace:
            by_pace[pace] = cls(loop, pace)
        return by_pace[pace]

    def __init__(self, loop: asyncio.AbstractEventLoop, pace: float) -> None:
        self.loop, self.pace = loop, pace
        self.waiting: dict[int, tuple[asyncio.Future, float]] = {}
        self.handle: asyncio.TimerHandle | None = None
        self.streams = 0  # fast streams of the loop read on these ticks, waiting now or not
        self.fast = 0  # fast streams of the loop, on the ticks or not (TICK_STREAMS)

    def read(self, fd: int, quiet_at: float) -> asyncio.Future:
        """What the socket `fd` holds at the next tick that finds something: bytes (b"" when the
        server closed it), or None once a tick at or after `quiet_at` found nothing."""
        future = self.loop.create_future()
        self.waiting[fd] = (future, quiet_at)
        if self.handle is None:
            self._schedule()
        return future

    def interval(self) -> float:
        for streams, times in BUSY_STEPS:
            if self.streams >= streams:
                return self.pace * times
        return self.pace

    def _schedule(self) -> None:
        interval = self.interval()
        self.handle = self.loop.call_at((math.floor(self.loop.time() / interval) + 1) * interval, self._tick)

    def _tick(self) -> None:
        self.handle, now = None, self.loop.time()
        waiting, self.waiting = self.waiting, {}
        for fd, (future, quiet_at) in waiting.items():
            if future.done():  # cancelled: a stop, or the stream was closed
                continue
            try:
                data = os.read(fd, TICK_READ_SIZE)
            except (BlockingIOError, InterruptedError):
                if now >= quiet_at:
                    future.set_result(None)
                else:
                    self.waiting[fd] = (future, quiet_at)
            except OSError as exc:  # a reset connection: what a read in the loop raises
                future.set_exception(httpx.ReadError(f"{type(exc).__name__}: {exc}"))
            else:
                future.set_result(data)
        if self.waiting:
            self._schedule()


async def _hold(reader: asyncio.StreamReader, seconds: float) -> None:
    """Wait with the socket unread: what arrives meanwhile stays in the kernel, where the next
    read takes all of it, instead of waking the loop for every line."""
    transport = reader._transport
    if not transport.is_reading():  # paused already (a full buffer)
        await asyncio.sleep(seconds)
        return
    transport.pause_reading()
    try:
        await asyncio.sleep(seconds)
    finally:
        if not transport.is_closing():
            transport.resume_reading()


async def _error_text(reader: asyncio.StreamReader, decoder, timeout: float) -> str:
    body = b""
    try:
        while not decoder.done and len(body) < MAX_ERROR_BODY:
            data = await _read(reader, timeout)
            if not data:
                break
            body += decoder.feed(data)
    except (httpx.HTTPError, ConnectionError):
        pass  # the status says enough
    return body.decode("utf-8", "replace")
