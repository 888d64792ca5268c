"""agent.llm.ndjson, the lean reader of Ollama's streamed replies, against raw TCP servers that
split the reply at awkward places, and the Ollama backend's merging of the lines of one read."""

from __future__ import annotations

import asyncio
import json
import os
import random
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import ollama
import pytest

from agent.llm import ndjson
from agent.llm.ollama_backend import UnreadableReply, _merged, _plain_run, base_url

ROOT = Path(__file__).resolve().parent.parent


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _line_script(lines: int, gap: float = 0.005) -> list:
    """A chunked reply of `lines` lines {"n": i}, one every `gap` seconds (RawServer steps)."""
    steps: list = [OK_CHUNKED]
    for i in range(lines):
        steps += [_chunked(b'{"n": %d}\n' % i)[:-5], gap]
    return steps + [b"0\r\n\r\n"]


class _TcpServer:
    """A local server on a free port; `url` is its /api/chat."""

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/api/chat"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")))
        return head + await reader.readexactly(length)


class RawServer(_TcpServer):
    """Accepts one connection, reads the request, then plays `script`: bytes to send, floats to
    sleep, None to close. What the client sent and whether it hung up are recorded."""

    def __init__(self, script: list) -> None:
        self.script = script
        self.request = b""
        self.client_gone = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.request = await self._read_request(reader)
        try:
            for step in self.script:
                if step is None:
                    break  # hang up now
                if step == "hold":
                    await reader.read()  # until the client goes
                    self.client_gone.set()
                    break
                if isinstance(step, float):
                    await asyncio.sleep(step)
                    continue
                writer.write(step)
                await writer.drain()
        except (ConnectionError, OSError):
            self.client_gone.set()
        finally:
            writer.close()


async def collect(url: str, timeout: float = 10.0) -> list[list[bytes]]:
    return [batch async for batch in ndjson.post_lines(url, {"model": "m"}, {"X-Test": "1"}, timeout)]


OK_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"


class TestChunkedDecoding:
    def test_any_split_of_the_bytes_gives_the_same_body(self):
        body = b'{"a": 1}\n{"b": 2}\n' * 3
        wire = b"5;ext=1\r\n" + body[:5] + b"\r\n" + b"%x\r\n" % (len(body) - 5) + body[5:] + b"\r\n0\r\nX-Trailer: y\r\n\r\n"
        for size in (1, 2, 3, 7, len(wire)):
            decoder = ndjson._Chunked()
            out = b"".join(decoder.feed(wire[i : i + size]) for i in range(0, len(wire), size))
            assert out == body and decoder.done, size

    def test_garbage_is_a_protocol_error(self):
        with pytest.raises(httpx.RemoteProtocolError):
            ndjson._Chunked().feed(b"zz\r\nhello\r\n")
        with pytest.raises(httpx.RemoteProtocolError):
            ndjson._Chunked().feed(b"2\r\nhiXX")
        with pytest.raises(httpx.RemoteProtocolError):  # whole at once, the short way
            ndjson._Chunked().feed(b"2\r\nhiXX\r\n")
        with pytest.raises(httpx.RemoteProtocolError):  # a negative size would never end
            ndjson._Chunked().feed(b"-5\r\nhello\r\n")

    def test_many_whole_chunks_in_one_read(self):
        lines = [b'{"n": %d}\n' % i for i in range(50)]
        wire = b"".join(b"%x\r\n%s\r\n" % (len(line), line) for line in lines) + b"0\r\n\r\n"
        decoder = ndjson._Chunked()
        assert decoder.feed(wire) == b"".join(lines) and decoder.done and decoder.buf == b""


    def test_whole_chunks_split_anywhere_and_crlf_inside_data_decode_as_written(self):
        # A chunk whose data holds CRLF (as pieces that look like chunk headers) must not be
        # taken for several chunks, whether it comes whole or in pieces.
        pieces = [b'{"n": 1}\n', b"a\r\n1\r\nb\r\n", b"2\r\n\r\n", b"\r\n", b'{"n": 2}\n'] * 3
        wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        for size in (1, 3, 8, 13, 40, len(wire)):
            decoder = ndjson._Chunked()
            out = b"".join(decoder.feed(wire[i : i + size]) for i in range(0, len(wire), size))
            assert out == b"".join(pieces) and decoder.done, size


def test_the_request_body_is_json_even_where_orjson_refuses():
    assert json.loads(ndjson._body({"text": "héllo ✓", "t": 0.7, "tools": [{"a": None}]})) == {
        "text": "héllo ✓", "t": 0.7, "tools": [{"a": None}]}
    assert json.loads(ndjson._body({1: "int key", "big": 2**70})) == {"1": "int key", "big": 2**70}


@pytest.fixture
def busy_loop(monkeypatch):
    """A loop as busy as TICK_STREAMS fast streams: here one fast stream already is read on ticks."""
    monkeypatch.setattr(ndjson, "TICK_STREAMS", 1)


class TestReading:
    async def test_lines_split_across_chunks_and_reads_come_out_whole_and_in_order(self):
        lines = [json.dumps({"message": {"content": c}}).encode() for c in "abcdef"]
        wire = OK_CHUNKED + _chunked(lines[0] + b"\n" + lines[1][:5], lines[1][5:] + b"\n", *(l + b"\n" for l in lines[2:]))
        script = [wire[:40], 0.02, wire[40:77], 0.02, wire[77:]]
        async with RawServer(script) as server:
            batches = await collect(server.url)
        assert [l for batch in batches for l in batch] == lines
        assert b"POST /api/chat HTTP/1.1" in server.request and b"X-Test: 1" in server.request
        assert json.loads(server.request.split(b"\r\n\r\n", 1)[1]) == {"model": "m"}

    async def test_lines_that_arrive_together_come_in_one_batch(self):
        wire = OK_CHUNKED + _chunked(*(b'{"n": %d}\n' % i for i in range(50)))
        async with RawServer([wire]) as server:
            batches = await collect(server.url)
        assert len(batches) == 1 and len(batches[0]) == 50

    @pytest.mark.usefixtures("busy_loop")
    async def test_lines_faster_than_the_pace_are_read_together(self):
        lines = [b'{"n": %d}' % i for i in range(40)]
        script = [OK_CHUNKED]
        for line in lines:
            script += [_chunked(line + b"\n")[:-5], 0.002]  # a line every ~2 ms
        script.append(b"0\r\n\r\n")
        async with RawServer(script) as server:
            batches = [b async for b in ndjson.post_lines(server.url, {}, {}, 10.0, pace=0.05)]
        assert [l for batch in batches for l in batch] == lines
        assert len(batches) <= 6  # ~80 ms of lines at most every 50 ms (one at once, the rest held)

    async def test_a_fast_stream_on_a_quiet_loop_is_read_as_its_lines_come(self, monkeypatch):
        """Below TICK_STREAMS fast streams nothing is held for a tick or a timer: each line is
        read and given out as it arrives (a step's answer, a piece every ~2 ms here)."""
        waits = []
        monkeypatch.setattr(ndjson, "_hold", lambda *a: waits.append("hold"))
        monkeypatch.setattr(ndjson._Ticks, "read", lambda *a: waits.append("tick"))
        lines = [b'{"n": %d}' % i for i in range(40)]
        script = [OK_CHUNKED]
        for line in lines:
            script += [_chunked(line + b"\n")[:-5], 0.002]
        script.append(b"0\r\n\r\n")
        async with RawServer(script) as server:
            batches = [b async for b in ndjson.post_lines(server.url, {}, {}, 10.0, pace=0.05)]
        assert [l for batch in batches for l in batch] == lines and waits == []
        assert ndjson._Ticks.of(asyncio.get_running_loop(), 0.05).fast == 0  # counted off at its end

    async def test_a_model_slower_than_the_pace_never_waits_on_a_timer(self, monkeypatch):
        waits = []
        real_hold, real_read = ndjson._hold, ndjson._Ticks.read

        async def counted_hold(reader, seconds):
            waits.append(("hold", seconds))
            await real_hold(reader, seconds)

        def counted_read(ticks, fd, quiet_at):
            waits.append(("tick", fd))
            return real_read(ticks, fd, quiet_at)

        monkeypatch.setattr(ndjson, "_hold", counted_hold)
        monkeypatch.setattr(ndjson._Ticks, "read", counted_read)
        script = [OK_CHUNKED]
        for i in range(6):
            script += [_chunked(b'{"n": %d}\n' % i)[:-5], 0.12]  # a line every 120 ms
        script.append(b"0\r\n\r\n")
        async with RawServer(script) as server:
            batches = [b async for b in ndjson.post_lines(server.url, {}, {}, 10.0, pace=0.05)]
        assert len(batches) == 6 and waits == []  # each line read as it came, no tick or timer

    @pytest.mark.usefixtures("busy_loop")
    async def test_fast_streams_are_read_together_on_shared_ticks(self, monkeypatch):
        """Two streams at full speed: once found fast, both are read on the same ticks, a tick
        waking the process once for both."""
        pace, ticked = 0.05, []
        real_tick = ndjson._Ticks._tick

        def counted_tick(ticks):
            ticked.append(len(ticks.waiting))
            real_tick(ticks)

        monkeypatch.setattr(ndjson._Ticks, "_tick", counted_tick)
        loop = asyncio.get_running_loop()

        async def read(url):
            return [(loop.time(), batch) async for batch in ndjson.post_lines(url, {}, {}, 10.0, pace=pace)]

        async with RawServer(_line_script(60)) as one, RawServer(_line_script(60)) as two:  # ~300 ms
            first, second = await asyncio.gather(read(one.url), read(two.url))
        ticks_taken = 0.0
        for got in (first, second):
            assert [l for _, batch in got for l in batch] == [b'{"n": %d}' % i for i in range(60)]
            # One batch a tick, not one a line: as many as the stream's ticks (~300 ms of 5-ms lines;
            # longer on a loaded machine, where the server's sleeps overshoot) plus the few lines
            # read one by one before the stream was found fast (more of them on a loaded machine),
            # far fewer than the 60 lines.
            ticks_taken = max(ticks_taken, (got[-1][0] - got[0][0]) / pace)
            assert len(got) <= ticks_taken + 8 and len(got) <= 20
        assert max(ticked) == 2  # one tick read both streams
        assert len(ticked) <= ticks_taken + 6

    @pytest.mark.usefixtures("busy_loop")
    @pytest.mark.parametrize("steps, times", [(((2, 2),), 2), (((2, 3), (1, 2)), 3)])
    async def test_many_fast_streams_are_read_on_ticks_paces_apart(self, monkeypatch, steps, times):
        """A busy loop (here 2 fast streams) reads them every `times` paces (BUSY_STEPS): fewer,
        fuller frames; every line still arrives, in order."""
        monkeypatch.setattr(ndjson, "BUSY_STEPS", steps)
        pace, ticks = 0.05, []
        real_tick = ndjson._Ticks._tick

        def timed_tick(t):
            ticks.append((t.loop.time(), t.streams))
            real_tick(t)

        monkeypatch.setattr(ndjson._Ticks, "_tick", timed_tick)

        async def read(url):
            return [batch async for batch in ndjson.post_lines(url, {}, {}, 10.0, pace=pace)]

        async with RawServer(_line_script(160)) as one, RawServer(_line_script(160)) as two:  # ~800 ms
            got = await asyncio.gather(read(one.url), read(two.url))
        for batches in got:
            assert [l for batch in batches for l in batch] == [b'{"n": %d}' % i for i in range(160)]
        # (the first busy tick may have been scheduled while one stream alone was fast)
        busy = [at for at, streams in ticks if streams >= 2][1:]
        assert len(busy) >= 2
        # ticks of the busy loop fall on multiples of `times` paces
        assert all(abs(at / (times * pace) - round(at / (times * pace))) < 0.2 for at in busy)
        gaps = sorted(b - a for a, b in zip(busy, busy[1:]))
        # Spaced `times` paces apart: the median gap says so. (One tick the loaded machine ran
        # late, followed by the next on time, made a lone short gap: a flake of `make test`.)
        assert gaps[len(gaps) // 2] > (times - 0.5) * pace, gaps

    @pytest.mark.usefixtures("busy_loop")
    async def test_one_fast_stream_is_read_every_pace(self, monkeypatch):
        pace, ticks = 0.05, []
        real_tick = ndjson._Ticks._tick
        monkeypatch.setattr(ndjson._Ticks, "_tick", lambda t: ticks.append(t.loop.time()) or real_tick(t))
        async with RawServer(_line_script(80)) as server:
            batches = [b async for b in ndjson.post_lines(server.url, {}, {}, 10.0, pace=pace)]
        assert [l for b in batches for l in b] == [b'{"n": %d}' % i for i in range(80)]
        gaps = [b - a for a, b in zip(ticks, ticks[1:])]
        assert gaps and min(gaps) < 1.5 * pace  # not slowed down: a single stream keeps the pace

    @pytest.mark.usefixtures("busy_loop")
    async def test_a_stream_that_slows_down_leaves_the_ticks(self, monkeypatch):
        """Fast lines, then one every 80 ms (slower than the 50 ms pace, never quiet for
        QUIET_TICKS): once a tick finds a single line, the rest are read as they come, not held
        until the next tick. (A paced stream whose lines piled up during a stall of the server
        looked fast and stayed on the ticks: ~30 ms added to every later line.)"""
        pace, tick_reads = 0.05, []
        real_read = ndjson._Ticks.read

        def counted_read(ticks, fd, quiet_at):
            tick_reads.append(ticks.loop.time())
            return real_read(ticks, fd, quiet_at)

        monkeypatch.setattr(ndjson._Ticks, "read", counted_read)
        script = [OK_CHUNKED]
        for i in range(30):
            script += [_chunked(b'{"n": %d}\n' % i)[:-5], 0.005]
        for i in range(30, 40):
            script += [0.08, _chunked(b'{"n": %d}\n' % i)[:-5]]
        script.append(b"0\r\n\r\n")
        loop, got = asyncio.get_running_loop(), []
        async with RawServer(script) as server:
            async for batch in ndjson.post_lines(server.url, {}, {}, 10.0, pace=pace):
                got.append((loop.time(), batch))
        assert [l for _, b in got for l in b] == [b'{"n": %d}' % i for i in range(40)]
        slow_start = next(t for t, b in got if b'{"n": 31}' in b)
        assert len([t for t in tick_reads if t > slow_start]) <= 1
        slow = [t for t, b in got if any(l in b for l in (b'{"n": %d}' % i for i in range(32, 40)))]
        assert len(slow) == 8  # one batch a line: read as each came

    @pytest.mark.usefixtures("busy_loop")
    async def test_a_fast_stream_that_goes_quiet_is_read_as_lines_come_again(self):
        lines = [_chunked(b'{"n": %d}\n' % i)[:-5] for i in range(5)]
        script = [OK_CHUNKED, lines[0], 0.002, lines[1], 0.002, lines[2], 0.002, lines[3], 1.0, lines[4], b"0\r\n\r\n"]
        async with RawServer(script) as server:
            loop, got = asyncio.get_running_loop(), []
            async for batch in ndjson.post_lines(server.url, {}, {}, 10.0, pace=0.05):
                got.append((loop.time(), batch))
        assert [l for _, b in got for l in b] == [b'{"n": %d}' % i for i in range(5)]
        # The last line came 1 s after the others, long after the stream went quiet: it is read
        # when it arrives, not on a tick (which it would meet at most 50 ms later).
        last_gap = got[-1][0] - got[-2][0]
        assert 0.9 < last_gap < 1.2

    @pytest.mark.usefixtures("busy_loop")
    async def test_a_server_that_closes_between_ticks_is_a_protocol_error(self):
        lines = [_chunked(b'{"n": %d}\n' % i)[:-5] for i in range(4)]
        script = [OK_CHUNKED, lines[0], 0.002, lines[1], 0.002, lines[2], 0.002, lines[3], None]
        async with RawServer(script) as server:
            got = []
            with pytest.raises(httpx.RemoteProtocolError):
                async for batch in ndjson.post_lines(server.url, {}, {}, 10.0, pace=0.05):
                    got += batch
        assert got == [b'{"n": %d}' % i for i in range(4)]

    @pytest.mark.usefixtures("busy_loop")
    async def test_a_stream_over_tls_is_held_by_a_timer_not_read_on_ticks(self, tmp_path, monkeypatch):
        cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True, timeout=60,
        )
        server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_side.load_cert_chain(cert, key)
        client_side = ssl.create_default_context(cafile=str(cert))
        monkeypatch.setattr(ndjson, "_ssl_context", client_side)
        ticked, held = [], []
        real_read, real_hold = ndjson._Ticks.read, ndjson._hold
        monkeypatch.setattr(ndjson._Ticks, "read", lambda *a: ticked.append(a) or real_read(*a))

        async def counted_hold(reader, seconds):
            held.append(seconds)
            await real_hold(reader, seconds)

        monkeypatch.setattr(ndjson, "_hold", counted_hold)
        script = [OK_CHUNKED]
        for i in range(20):
            script += [_chunked(b'{"n": %d}\n' % i)[:-5], 0.003]
        script.append(b"0\r\n\r\n")
        server = RawServer(script)
        listening = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=server_side)
        try:
            url = f"https://127.0.0.1:{listening.sockets[0].getsockname()[1]}/api/chat"
            batches = [b async for b in ndjson.post_lines(url, {}, {}, 10.0, pace=0.05)]
        finally:
            listening.close()
        assert [l for b in batches for l in b] == [b'{"n": %d}' % i for i in range(20)]
        assert ticked == [] and held  # TLS bytes are never read past the TLS layer

    async def test_a_line_after_a_pause_is_not_held_back(self):
        script = [OK_CHUNKED, _chunked(b'{"a": 1}\n')[:-5], 1.0, _chunked(b'{"b": 2}\n')]
        async with RawServer(script) as server:
            got = []
            async for batch in ndjson.post_lines(server.url, {}, {}, 10.0, pace=0.5):
                got.append((asyncio.get_running_loop().time(), batch))
        assert [b for _, b in got] == [[b'{"a": 1}'], [b'{"b": 2}']]
        # The second line came 1.0 s after the first, past the pace: read at once, not held
        # another 0.5 s.
        assert got[1][0] - got[0][0] < 1.35

    @pytest.mark.usefixtures("busy_loop")
    async def test_a_stop_while_lines_are_held_hangs_up(self):
        b, c = _chunked(b'{"b": 2}\n')[:-5], _chunked(b'{"c": 3}\n')[:-5]
        script = [OK_CHUNKED + _chunked(b'{"a": 1}\n')[:-5], 0.05, b, 0.05, c, "hold"]
        async with RawServer(script) as server:
            lines = ndjson.post_lines(server.url, {}, {}, 10.0, pace=30.0)
            assert await anext(lines) == [b'{"a": 1}']
            assert await anext(lines) == [b'{"b": 2}']  # sooner than the pace: the next read waits
            with pytest.raises(TimeoutError):  # held for the pace: the stop cancels the wait
                await asyncio.wait_for(anext(lines), 0.3)
            await lines.aclose()
            await asyncio.wait_for(server.client_gone.wait(), 10)

    async def test_a_sized_and_a_close_delimited_reply(self):
        body = b'{"x": 1}\n{"y": 2}'  # the last line without its newline
        sized = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        async with RawServer([sized, "hold"]) as server:
            assert [l for b in await collect(server.url) for l in b] == [b'{"x": 1}', b'{"y": 2}']
        async with RawServer([b"HTTP/1.0 200 OK\r\n\r\n" + body, None]) as server:
            assert [l for b in await collect(server.url) for l in b] == [b'{"x": 1}', b'{"y": 2}']

    async def test_an_error_status_is_the_clients_response_error(self):
        body = b'{"error": "model \\"nope\\" not found, try pulling it first"}'
        wire = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        async with RawServer([wire, "hold"]) as server:
            with pytest.raises(ollama.ResponseError) as caught:
                await collect(server.url)
        assert caught.value.status_code == 404 and "not found" in caught.value.error

    async def test_a_redirect_is_left_to_the_client(self):
        async with RawServer([b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n", "hold"]) as server:
            with pytest.raises(ndjson.Redirected):
                await collect(server.url)

    async def test_nobody_listening_is_a_connect_error(self, unused_tcp_port):
        with pytest.raises(httpx.ConnectError):
            await collect(f"http://127.0.0.1:{unused_tcp_port}/api/chat")

    async def test_silence_is_a_read_timeout(self):
        async with RawServer([OK_CHUNKED + _chunked(b'{"a": 1}\n')[:-5], "hold"]) as server:
            with pytest.raises(httpx.ReadTimeout):
                await collect(server.url, timeout=0.3)

    async def test_a_reply_cut_mid_body_is_a_protocol_error(self):
        async with RawServer([OK_CHUNKED + b"10\r\n" + b'{"a": 1}\n', None]) as server:
            with pytest.raises(httpx.RemoteProtocolError):
                await collect(server.url)

    async def test_closing_the_stream_hangs_up_at_once(self):
        # Generation ends server-side only when the connection goes: aclose must abort it.
        script = [OK_CHUNKED + _chunked(b'{"a": 1}\n')[:-5], "hold"]
        async with RawServer(script) as server:
            lines = ndjson.post_lines(server.url, {}, {}, 10.0)
            assert await anext(lines) == [b'{"a": 1}']
            await lines.aclose()
            await asyncio.wait_for(server.client_gone.wait(), 10)


def _line(**message) -> bytes:
    return json.dumps({"model": "m", "message": {"role": "assistant", **message}, "done": False}).encode()


class TestMerging:
    def test_runs_of_one_kind_merge_and_order_is_kept(self):
        done = json.dumps({"model": "m", "message": {"role": "assistant", "content": ""}, "done": True,
                           "done_reason": "stop", "prompt_eval_count": 7, "eval_count": 3}).encode()
        batch = [_line(thinking="hm"), _line(thinking="m."), _line(content="Hel"), _line(content="lo"), done]
        chunks = list(_merged(batch))
        assert [(c.thinking, c.content, c.done) for c in chunks] == [("hmm.", "", False), ("", "Hello", False), ("", "", True)]
        assert (chunks[-1].prompt_tokens, chunks[-1].completion_tokens) == (7, 3)

    def test_a_tool_call_line_stays_its_own_chunk(self):
        call = _line(content="", tool_calls=[{"function": {"name": "todo", "arguments": '{"action": "read"}'}}])
        chunks = list(_merged([_line(content="ok "), call, _line(content="then")]))
        assert [c.content for c in chunks] == ["ok ", "", "then"]
        assert chunks[1].tool_calls[0].name == "todo" and chunks[1].tool_calls[0].arguments == {"action": "read"}

    def test_text_before_an_error_line_is_not_lost(self):
        merged = _merged([_line(content="Half"), b'{"error": "the model crashed"}'])
        assert next(merged).content == "Half"
        with pytest.raises(ollama.ResponseError):
            next(merged)

    def test_a_line_that_is_not_an_object_is_a_protocol_error(self):
        with pytest.raises(httpx.RemoteProtocolError):
            list(_merged([b"[1, 2]"]))

    @pytest.mark.parametrize("line", [
        {"message": "text", "done": True},
        {"message": {"content": 5}, "done": True},
        {"message": {"tool_calls": {"function": {}}}},
        {"message": {"tool_calls": [{"function": {"name": 3, "arguments": {}}}]}},
        {"message": {"content": ""}, "done": "yes"},
        {"message": {"content": ""}, "done": True, "eval_count": "many"},
    ])
    def test_a_final_or_tool_line_of_the_wrong_shape_is_unreadable(self, line):
        # What the client's pydantic model refused is refused here too, without importing it.
        with pytest.raises(UnreadableReply):
            list(_merged([json.dumps(line).encode()]))


def _ollama_line(ascii_only: bool = True, **message) -> bytes:
    """A delta line as Ollama writes it: compact, fields in its order."""
    line = {"model": "qwen3:4b", "created_at": "2026-11-23T10:00:00.123456789Z",
            "message": {"role": "assistant", **message}, "done": False}
    return json.dumps(line, separators=(",", ":"), ensure_ascii=ascii_only).encode()


class TestPlainRuns:
    """A batch of nothing but text (or thinking) deltas is read in one pass; what it gives must
    be what reading each line gives."""

    TRICKY = ['"', "\\", "\\\"", "\n", "\t", "\x00", "\x1f", "é", "日本", "😀", "</script>", "&<>", "\u2028", " ", ""]

    def test_random_texts_come_out_exactly_as_written(self):
        rng = random.Random(14)
        for ascii_only in (True, False):
            for _ in range(200):
                texts = ["".join(rng.choice(self.TRICKY + ["a", "b"]) for _ in range(rng.randint(0, 4)))
                         for _ in range(rng.randint(2, 30))]
                lines = [_ollama_line(ascii_only, content=t) for t in texts]
                assert ndjson_plain(lines) == "".join(texts)  # read in one pass...
                chunks = list(_merged(lines))  # ...and what the stream gives
                assert [(c.content, c.thinking) for c in chunks] == [("".join(texts), "")]

    def test_a_thinking_run_is_one_thinking_chunk(self):
        texts = ["Let", " me", " think \"hard\"", " 😀"]
        chunks = list(_merged([_ollama_line(content="", thinking=t) for t in texts]))
        assert [(c.content, c.thinking) for c in chunks] == [("", "".join(texts))]

    def test_the_fast_reading_takes_only_lines_it_fully_understands(self):
        plain = [_ollama_line(content=t) for t in ("a", "b")]
        others = [
            _ollama_line(content="", thinking="t"),  # thinking among text: two chunks, in order
            _ollama_line(content="c", images=None),  # a field it does not know
            _ollama_line(content="", tool_calls=[{"function": {"name": "todo", "arguments": {}}}]),
            json.dumps({"model": "m", "created_at": "x", "message": {"role": "assistant", "content": "c"},
                        "done": False}).encode(),  # spaces after separators
        ]
        assert ndjson_plain(plain) == "ab"
        for other in others:
            assert ndjson_plain(plain + [other]) is None
        chunks = list(_merged(plain + [others[0]]))
        assert [(c.content, c.thinking) for c in chunks] == [("ab", ""), ("", "t")]

    @pytest.mark.parametrize("bad", [
        b'{"model":"m","created_at":"t","message":{"role":"assistant","content":"\\x"},"done":false}',  # bad escape
        b'{"model":"m","created_at":"t","message":{"role":"assistant","content":"\x01"},"done":false}',  # raw control
        b'{"model":"m","created_at":"t","message":{"role":"assistant","content":"\xff"},"done":false}',  # not UTF-8
        b'{"model":"m","created_at":"t","message":{"role":"assistant","content":"a"},"done":false}}',  # trailing
    ])
    def test_a_line_json_refuses_is_still_a_protocol_error(self, bad):
        with pytest.raises(httpx.RemoteProtocolError):
            list(_merged([_ollama_line(content="fine"), bad]))


def ndjson_plain(batch: list[bytes]) -> str | None:
    run = _plain_run(batch)
    return None if run is None else run.content


class TestWithoutTheOfficialClient:
    """A plain chat never needs the `ollama` client (its import was ~250 ms of the boot)."""

    @pytest.mark.parametrize("host", [
        None, "", "1.2.3.4", ":56789", "1.2.3.4:56789", "http://1.2.3.4", "https://1.2.3.4:56789", "example.com/",
        "example.com:56789/path/", "https://example.com:56789/path", "[0001:002:003:0004::1]",
        "[0001:002:003:0004::1]:56789/path/", "https://[0001:002:003:0004::1]",
    ])
    def test_ollama_host_means_what_it_means_to_the_client(self, host):
        from ollama._client import _parse_host

        assert base_url(host) == _parse_host(host)

    def test_the_server_starts_without_importing_it(self, tmp_path):
        code = (
            "import os, sys\n"
            "os.environ['DJANGO_SETTINGS_MODULE'] = 'navi_project.settings'\n"
            "import navi_project.serve\n"
            "from django.core.asgi import get_asgi_application\n"
            "get_asgi_application()\n"
            "import agent.web.consumers, agent.registry\n"
            "agent.registry.get_agent()\n"
            "print(sorted(m for m in ('ollama', 'pydantic', 'asyncssh', 'jsonschema', 'PIL.Image') if m in sys.modules))\n"
        )
        env = dict(os.environ, DATA_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3")
        env.pop("DJANGO_SETTINGS_MODULE", None)
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == "[]"


class KeepAliveServer(_TcpServer):
    """Answers every request on a connection with one chunked line; counts connections.
    `close_idle`: hang up right after each reply (as a server's idle timeout would) without
    saying so in the headers. `drop_second`: a connection's second request is read, then the
    connection closed unanswered (the server's idle timeout firing as the request came)."""

    def __init__(self, close_idle: bool = False, drop_second: bool = False, forge: bytes = b"", forge_late: bool = False) -> None:
        self.close_idle, self.drop_second = close_idle, drop_second
        self.forge, self.forge_late = forge, forge_late  # bytes written after the first reply
        self.connections = 0
        self.requests = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                await self._read_request(reader)
                if self.drop_second and served == 1:
                    break
                served += 1
                self.requests += 1
                writer.write(OK_CHUNKED + _chunked(b'{"n": %d}\n' % self.requests))
                if self.forge and served == 1:
                    if self.forge_late:
                        await writer.drain()
                        await asyncio.sleep(0.05)
                    writer.write(self.forge)
                await writer.drain()
                if self.close_idle:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class TestKeptConnections:
    async def test_a_reply_read_to_its_end_leaves_the_connection_for_the_next_request(self):
        async with KeepAliveServer() as server:
            first, second = await collect(server.url), await collect(server.url)
        assert (first, second) == ([[b'{"n": 1}']], [[b'{"n": 2}']])
        assert server.connections == 1

    async def test_a_kept_connection_the_server_closed_is_replaced_without_an_error(self):
        async with KeepAliveServer(close_idle=True) as server:
            assert await collect(server.url) == [[b'{"n": 1}']]
            assert await collect(server.url) == [[b'{"n": 2}']]
        assert server.connections == 2 and server.requests == 2

    async def test_a_kept_connection_closed_as_the_request_came_is_retried_once_on_a_new_one(self):
        async with KeepAliveServer(drop_second=True) as server:
            assert await collect(server.url) == [[b'{"n": 1}']]
            assert await collect(server.url) == [[b'{"n": 2}']]  # dropped once, answered on a new connection
        assert server.connections == 2 and server.requests == 2

    @pytest.mark.parametrize("late", [False, True])
    async def test_bytes_past_a_reply_never_become_the_next_reply(self, late):
        # A server that writes more than its reply, with it or later while the connection is
        # idle: the next request must get its own answer, on a new connection.
        async with KeepAliveServer(forge=b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\n{\"forged\": 1}\n",
                                   forge_late=late) as server:
            assert await collect(server.url) == [[b'{"n": 1}']]
            await asyncio.sleep(0.2)  # late bytes have arrived
            assert await collect(server.url) == [[b'{"n": 2}']]
        assert server.connections == 2

    async def test_a_new_connection_that_closes_unanswered_is_an_error_not_a_retry(self):
        async with RawServer([None]) as server:
            with pytest.raises(httpx.RemoteProtocolError):
                await collect(server.url)

    async def test_a_reply_closed_early_is_not_kept(self):
        script = [OK_CHUNKED + _chunked(b'{"a": 1}\n', b'{"b": 2}\n'), "hold"]
        async with RawServer(script) as server:
            lines = ndjson.post_lines(server.url, {}, {}, 10.0)
            assert await anext(lines) == [b'{"a": 1}', b'{"b": 2}']
            await lines.aclose()  # the terminating chunk was never read
            await asyncio.wait_for(server.client_gone.wait(), 10)
