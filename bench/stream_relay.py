"""Benchmark: how fast and how promptly Navi relays a streaming answer to a WebSocket client.

    .venv/bin/python bench/stream_relay.py [--quick]

Prints figures, asserts nothing. Set-up: the protocol-level test LLM server runs in its own
process (`tests.llm_server`, wrapped here only to record when it writes each piece), one real
Navi server (daphne, in-memory channel layer, planning disabled), and this process as the
client. The texts are random letters with ~5 % of characters JSON escapes (newline, tab, quote,
backslash) or past ASCII (é, €, ü, and 😀, a surrogate pair in JSON). On a request with a JSON
schema (`auto`'s step) the server writes the answer inside `{"name":"answer","text":"…"}`, the
text as JSON spells it, cut every `chunk_size` characters as a model's tokens cut it (a `\`
at the end of one piece, its `n` at the start of the next); a delta is one piece the server
wrote (one NDJSON line), and each character Navi relays is matched to the piece that completed
it (decoded here with `json`) for its lag. Parts:

  (a) deltas/s one WebSocket client receives through Navi vs the bare `ollama.AsyncClient`
      against the same server in the same run (server streams 1 char per chunk, no delay).
  (b) first-delta latency Navi adds: WS `message` sent -> first `stream_delta`, minus the bare
      client's call -> first chunk; paired runs, p50/p95.
  (c) 50 concurrent sessions x 1 000 deltas: total deltas/s, server CPU per delta and delivery
      lag (client receive time - the time the LLM server wrote the piece that completed it,
      both `time.time()` on this machine), once paced like a fast model (10 ms per piece per
      session) and once unpaced (burst).

The hot-path table (the figures a user feels), each next to the bare client in the same run, for
each profile mode in `--modes` (default `auto,native`; the LLM server honours `format` as Ollama
does, so `auto` takes the constrained path; on `auto`'s half the bare client sends the same
answer schema, so it reads the very bytes Navi reads):

  (d) first delta after send, p50, and how much of it passes before Navi's LLM request reaches
      the server (the server notes when each request arrives); the LLM requests a plain message
      of a new chat made before its first word.
  (e) 20 sessions x 2 000 characters at once, 1 a piece: total deltas/s, Navi against 20 bare
      clients; medians of 5 rounds, the order of the two sides alternating. Server CPU per delta
      relayed: the Navi process's own CPU time (/proc/<pid>/stat, every thread) over the Navi
      half of each round, divided by the pieces it relayed (every stream's text checked whole).
  (f) 20 streams of 160 characters, 3 a piece, 50 ms apart, while 20 new runs start beside them
      (from a client process of their own): delivery lag p99 of the paced streams (receive time
      - the time the server wrote the piece that completed it).
  (g) idle RSS of the Navi process and its boot time (start -> first /health 200).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BIG = 4000  # deltas in part (a)
MANY_SESSIONS, MANY_DELTAS = 50, 1000
E_SESSIONS, E_DELTAS, E_ROUNDS = 20, 2000, 5  # part (e)
# part (f): 160 characters, 3 a piece (a model's token), 50 ms apart: ~3 s per stream
F_SESSIONS, F_CHARS, F_STARTS = 20, 160, 20


# --- the LLM server process, with an emission tap -----------------------------------------------
def serve_llm(rules: str, tap: str) -> None:
    """`tests.llm_server` main(), plus a JSON line per stream: its user message and chunk times."""
    from tests import llm_server as ls

    lock, out = threading.Lock(), open(tap, "a", encoding="utf-8")
    original_ollama, original_stream, original_post = ls._Handler._ollama, ls._Handler._stream, ls._Handler.do_POST

    def post(self):
        # "Arrived": the request's head is read and its handling starts. Stamped in `_ollama`
        # instead (until 2026-11-27), it also counted this server's own JSON parsing and its check
        # of the scripted reply against a step's schema: ~0.3 ms more on `auto`'s requests.
        self._tap_received = time.time()
        return original_post(self)

    def ollama(self, body, model, turn):
        parsed = time.time()
        self._tap_key = ls._user_words(body.get("messages") or [])  # without the clock and notes under it
        self._tap_arrived = getattr(self, "_tap_received", parsed)
        self._tap_parsed = parsed
        return original_ollama(self, body, model, turn)

    def stream(self, turn, ctype, frames, tail):
        # The pieces of the text as written (the JSON of a step, or plain text): the bench maps each
        # character Navi relays to the piece that completed it (a split escape completes later).
        # A chunk's time is when its write returns, not when the generator yields it: the
        # server waits the turn's delay between the two (that once added the whole 50 ms
        # pacing of part (f) to every "lag", the bare client's too).
        times: list[float] = []
        written = _StampedWrites(self.wfile, times)

        def tapped():
            for frame in frames:
                written.armed = True  # the next write is this frame's
                yield frame

        self.wfile = written
        try:
            original_stream(self, turn, ctype, tapped(), tail)
        finally:
            self.wfile = written.raw
            with lock:
                record = {"key": getattr(self, "_tap_key", ""), "arrived": getattr(self, "_tap_arrived", 0.0),
                          "parsed": getattr(self, "_tap_parsed", 0.0), "times": times,
                          "pieces": turn.pieces(turn.content)[:len(times)]}
                out.write(json.dumps(record) + "\n")
                out.flush()

    ls._Handler._ollama, ls._Handler._stream, ls._Handler.do_POST = ollama, stream, post
    # `format` honoured as Ollama does: Navi's default `auto` profile takes its constrained path.
    ls.main(["--port", "0", "--rules", rules, "--schemas", "format"])


class _StampedWrites:
    """The handler's wfile, noting when each armed write (one content chunk) has been made."""

    def __init__(self, raw, times: list[float]) -> None:
        self.raw, self.times, self.armed = raw, times, False

    def write(self, data: bytes) -> int:
        n = self.raw.write(data)
        if self.armed:
            self.times.append(time.time())
            self.armed = False
        return n

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


# What JSON escapes, and characters past ASCII (one outside the BMP: a surrogate pair in JSON).
SPECIAL = '\n"\\\té€ü😀'


def unrepeating(n: int, special: float = 0.05) -> str:
    """n letters, digits and spaces drawn at random (seeded): no loop for Navi's guard to cut;
    a share `special` of them from SPECIAL, so a step's JSON carries escapes to split."""
    rnd, plain = random.Random(n), string.ascii_letters + string.digits + " "
    return "".join(rnd.choice(SPECIAL) if rnd.random() < special else rnd.choice(plain) for _ in range(n))


# The schema the bare client sends on `auto`'s half of the table: the test server then writes it the
# very JSON (pieces of `{"name":"answer","text":"…"}`) it writes Navi's constrained step.
ANSWER_SCHEMA = {"anyOf": [{"type": "object", "properties": {"name": {"const": "answer"}, "text": {"type": "string"}},
                            "required": ["name"], "additionalProperties": False}]}


def completing_pieces(pieces: list[str]) -> list[int]:
    """For each character of the answer the pieces carry, the index of the piece that completes
    it: plain text, or a step's JSON (`{"name":"answer","text":"…"}`) whose escapes may be split
    over pieces (decoded here by `json`, independently of Navi's decoder)."""
    full = "".join(pieces)
    if not full.startswith("{"):
        return [i for i, piece in enumerate(pieces) for _ in piece]
    start, end = full.index('"text":"') + len('"text":"'), len(full) - len('"}')
    out, written = [], 0
    for i, piece in enumerate(pieces):
        written += len(piece)
        if written > start:
            out += [i] * (_decoded_length(full[start:min(written, end)]) - len(out))
    return out


def _decoded_length(text: str) -> int:
    """Characters of a JSON string's inside `text` that are complete (an escape cut at the end, or
    a surrogate pair's first half, is not yet a character)."""
    for cut in range(13):
        try:
            decoded = json.loads('"' + text[:len(text) - cut] + '"')
        except ValueError:
            continue
        if not (decoded and "\ud800" <= decoded[-1] <= "\udbff"):
            return len(decoded)
    raise ValueError(f"not the inside of a JSON string: {text[-20:]!r}")


def start_llm(workdir: Path, quick: bool) -> tuple[subprocess.Popen, str, Path]:
    # Text that never repeats itself: Navi cuts an answer that loops (agent.turn.runaway), so a
    # pattern repeated would be cut after a few hundred characters, not relayed.
    # (a)'s 4 000 characters stay plain: with escapes its JSON would pass the answer's token cap
    # (4 096 pieces) on `auto`.
    text, many = unrepeating(BIG, special=0), unrepeating(MANY_DELTAS)
    rules = [
        {"match": "bench-a", "turns": [{"content": text, "chunk_size": 1}]},
        {"match": "bench-b", "turns": [{"content": "hi there", "chunk_size": 1}]},
        {"match": "bench-c-paced", "turns": [{"content": many, "chunk_size": 1, "delay": 0.01}]},
        {"match": "bench-c-burst", "turns": [{"content": many, "chunk_size": 1}]},
        {"match": "bench-e", "turns": [{"content": unrepeating(E_DELTAS), "chunk_size": 1}]},
        {"match": "bench-f-paced", "turns": [{"content": unrepeating(F_CHARS), "chunk_size": 3, "delay": 0.05}]},
        {"match": "bench-f-start", "turns": [{"content": "ok, started", "chunk_size": 1}]},
    ]
    rules_path, tap = workdir / "rules.json", workdir / "tap.jsonl"
    rules_path.write_text(json.dumps(rules))
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-llm", str(rules_path), str(tap)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline().strip()
    if not line.startswith("LISTENING "):
        raise SystemExit(f"the test LLM server did not start: {line!r}")
    return proc, line.split()[1], tap


def read_tap(tap: Path) -> dict[str, list[float]]:
    return {key: record["times"] for key, record in read_tap_records(tap).items()}


async def tap_records(tap: Path, keys: list[str]) -> dict[str, dict]:
    """The tap once it holds every key: the server writes a stream's record after its last
    write, which can come after the client already has the whole answer."""
    for _ in range(500):
        records = read_tap_records(tap)
        if all(k in records for k in keys):
            return records
        await asyncio.sleep(0.01)
    raise RuntimeError(f"the LLM server never recorded {[k for k in keys if k not in records]}")


def read_tap_lines(tap: Path) -> list[dict]:
    return [json.loads(line) for line in tap.read_text().splitlines()]


def read_tap_records(tap: Path) -> dict[str, dict]:
    """key -> {"arrived": when the request reached the LLM server, "times": chunk write times}."""
    result = {}
    for line in tap.read_text().splitlines():
        record = json.loads(line)
        result[record["key"]] = record
    return result


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- clients ------------------------------------------------------------------------------------
async def bare_stream(host: str, content: str, wall: bool = False, schema: dict | None = None) -> tuple[float, list[float]]:
    """(time of the call, receive time of every content chunk) with the plain ollama client;
    with `schema`, sent as `format` (the reply is then a step's JSON, as Navi's `auto` gets it)."""
    import ollama

    clock = time.time if wall else time.perf_counter
    # Closed after each stream: a client left open keeps its connection (and a thread of the LLM
    # server) for good; twenty a round made both the server and this process slower round after
    # round (bare 14k -> 9.5k deltas/s over 10 rounds of (e)), for both sides of the table.
    async with ollama.AsyncClient(host=host) as client:
        t0 = clock()
        stamps = []
        async for part in await client.chat(
            model="fake-llm:latest", messages=[{"role": "user", "content": content}], stream=True, format=schema
        ):
            if part.message.content:
                stamps.append(clock())
    return t0, stamps


async def navi_stream(navi, session_id: str, content: str, wall: bool = False) -> tuple[float, list[tuple[float, str]]]:
    """(time the message was sent, [(receive time, delta)]) through Navi's WebSocket."""
    from tests.live_ws import connect

    clock = time.time if wall else time.perf_counter
    async with connect(navi, session_id) as ws:
        t0 = clock()
        await ws.send(json.dumps({"type": "message", "content": content}))
        got = []
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 120))
            if frame["type"] == "stream_delta":
                got.append((clock(), frame["delta"]))
            elif frame["type"] in ("stream_end", "stream_stopped", "error"):
                if frame["type"] != "stream_end":
                    raise RuntimeError(f"run ended with {frame}")
                return t0, got


def navi_lags(record: dict, got: list[tuple[float, str]]) -> list[float]:
    """ms from the LLM server's write of the piece that completed each delta to its arrival."""
    completes, offset, lags = completing_pieces(record["pieces"]), 0, []
    for received, delta in got:
        offset += len(delta)
        lags.append((received - record["times"][completes[offset - 1]]) * 1000)
    return lags


def rate(stamps: list[float]) -> float:
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0


def char_rate(got: list[tuple[float, str]]) -> float:
    """LLM deltas (one character each) delivered per second. Under load Navi merges waiting
    deltas into one frame, so frames are not counted: the characters they carry are."""
    if len(got) < 2:
        return 0.0
    chars = sum(len(d) for _, d in got) - len(got[0][1])
    return chars / (got[-1][0] - got[0][0])


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# --- parts --------------------------------------------------------------------------------------
async def part_a(navi, host: str, rounds: int) -> None:
    bare_rates, navi_rates = [], []
    for i in range(rounds):
        _, stamps = await bare_stream(host, f"bench-a bare {i}")
        bare_rates.append(rate(stamps))
        sid = await asyncio.to_thread(navi.create_session)
        _, got = await navi_stream(navi, sid, f"bench-a navi {i}")
        assert "".join(d for _, d in got) == unrepeating(BIG, special=0), "Navi lost or reordered deltas"
        navi_rates.append(char_rate(got))
    b, n = statistics.median(bare_rates), statistics.median(navi_rates)
    print(f"(a) one session, {BIG} deltas, median of {rounds} rounds:")
    print(f"    bare ollama client {b:9.0f} deltas/s   rounds: {', '.join(f'{r:.0f}' for r in bare_rates)}")
    print(f"    through Navi (WS)  {n:9.0f} deltas/s   rounds: {', '.join(f'{r:.0f}' for r in navi_rates)}")
    print(f"    ratio Navi/bare    {n / b:9.2f}   (target >= 0.5)")


async def part_b(navi, host: str, rounds: int) -> None:
    bare, through, added = [], [], []
    for i in range(rounds):
        t0, stamps = await bare_stream(host, f"bench-b bare {i}")
        sid = await asyncio.to_thread(navi.create_session)
        t1, got = await navi_stream(navi, sid, f"bench-b navi {i}")
        bare.append((stamps[0] - t0) * 1000)
        through.append((got[0][0] - t1) * 1000)
        added.append(through[-1] - bare[-1])
    print(f"(b) first-delta latency over {rounds} paired runs (ms):")
    for name, values in (("bare ollama client", bare), ("through Navi", through), ("added by Navi", added)):
        print(f"    {name:20s} p50 {pct(values, 50):7.1f}   p95 {pct(values, 95):7.1f}")
    print("    (target: added p50 <= 15 ms)")


async def part_c(navi, tap: Path, label: str, sessions: int) -> None:
    sids = [await asyncio.to_thread(navi.create_session) for _ in range(sessions)]
    keys = [f"{label} #{i}" for i in range(sessions)]
    start, cpu0 = time.time(), cpu_seconds(navi.proc.pid)
    results = await asyncio.gather(
        *(navi_stream(navi, sid, key, wall=True) for sid, key in zip(sids, keys)), return_exceptions=True
    )
    elapsed, cpu = time.time() - start, cpu_seconds(navi.proc.pid) - cpu0
    errors = [r for r in results if isinstance(r, BaseException)]
    records = await tap_records(tap, keys)
    emitted = {k: r["times"] for k, r in records.items()}
    lags, total = [], 0
    for key, result in zip(keys, results):
        if isinstance(result, BaseException):
            continue
        lags += navi_lags(records[key], result[1])
        total += len(records[key]["times"])
    first = min(min(emitted[k]) for k in keys if k in emitted)
    last_rx = max(r[1][-1][0] for r in results if not isinstance(r, BaseException) and r[1])
    print(f"(c) {sessions} sessions x {MANY_DELTAS} deltas, {label}: {len(errors)} errors"
          + (f" (first: {errors[0]!r})" if errors else ""))
    print(f"    delivered {total} deltas in {elapsed:.2f} s -> {total / (last_rx - first):.0f} deltas/s total, "
          f"server CPU {cpu / total * 1e6:.1f} us/delta")
    print(f"    delivery lag ms: p50 {pct(lags, 50):.1f}  p95 {pct(lags, 95):.1f}  p99 {pct(lags, 99):.1f}"
          f"  max {max(lags):.1f}   (target p99 <= 250 ms)")


# --- the hot-path table ---------------------------------------------------------------------------
async def part_d(navi, host: str, tap: Path, rounds: int, tag: str = "", schema: dict | None = None) -> dict:
    """Also counts the LLM requests each message made before its first word (every request the
    server saw for that message's words: the tap keeps one line per request)."""
    bare, through, before, parsed, calls = [], [], [], [], []
    for i in range(rounds):
        t0, stamps = await bare_stream(host, f"bench-b bare-d{tag} {i}", wall=True, schema=schema)
        bare.append((stamps[0] - t0) * 1000)
        sid = await asyncio.to_thread(navi.create_session)
        key = f"bench-b navi-d{tag} {i}"
        t1, got = await navi_stream(navi, sid, key, wall=True)
        through.append((got[0][0] - t1) * 1000)
        await tap_records(tap, [key])
        records = [r for r in read_tap_lines(tap) if r["key"] == key]
        arrivals = [r["arrived"] for r in records]
        before.append((min(arrivals) - t1) * 1000)
        parsed.append((min(r.get("parsed") or r["arrived"] for r in records) - t1) * 1000)
        calls.append(sum(1 for a in arrivals if a < got[0][0]))
    figures = {"bare": pct(bare, 50), "navi": pct(through, 50), "before": pct(before, 50),
               "calls": statistics.mean(calls)}
    print(f"(d{tag}) first delta after send over {rounds} paired runs, p50 (p95) ms; LLM requests before the first word "
          f"{figures['calls']:.2f} a message:")
    print(f"    bare ollama client {figures['bare']:7.1f} ({pct(bare, 95):.1f})")
    print(f"    through Navi       {figures['navi']:7.1f} ({pct(through, 95):.1f})")
    print(f"    of which before Navi's LLM request arrived {figures['before']:7.1f} ({pct(before, 95):.1f})")
    print(f"    (until the test server had parsed and checked it {pct(parsed, 50):7.1f} ({pct(parsed, 95):.1f}))")
    return figures


async def _bare_many(host: str, keys: list[str], schema: dict | None) -> tuple[int, float]:
    results = await asyncio.gather(*(bare_stream(host, key, wall=True, schema=schema) for key in keys))
    deltas = sum(len(stamps) for _, stamps in results)
    return deltas, deltas / (max(stamps[-1] for _, stamps in results) - min(t0 for t0, _ in results))


async def _navi_many(navi, tap: Path, keys: list[str]) -> tuple[int, float, float]:
    """(deltas, deltas/s, server CPU seconds) for one stream per key, all at once. A delta is a
    piece the LLM server wrote (one NDJSON line, as the bare client counts them); every stream's
    text is checked whole."""
    sids = [await asyncio.to_thread(navi.create_session) for _ in keys]
    cpu0 = cpu_seconds(navi.proc.pid)
    results = await asyncio.gather(*(navi_stream(navi, sid, key, wall=True) for sid, key in zip(sids, keys)))
    cpu = cpu_seconds(navi.proc.pid) - cpu0
    if any("".join(d for _, d in got) != unrepeating(E_DELTAS) for _, got in results):
        raise RuntimeError("Navi lost, changed or reordered the text of a stream")
    records = await tap_records(tap, keys)
    deltas = sum(len(records[k]["times"]) for k in keys)
    return deltas, deltas / (max(got[-1][0] for _, got in results) - min(t0 for t0, _ in results)), cpu


async def part_e(navi, host: str, tap: Path, rounds: int, sessions: int, tag: str = "", schema: dict | None = None) -> dict:
    bare_rates, navi_rates, cpu_per_delta = [], [], []
    for r in range(rounds):
        for side in (("bare", "navi") if r % 2 == 0 else ("navi", "bare")):
            keys = [f"bench-e {side}{tag} r{r} #{j}" for j in range(sessions)]
            if side == "bare":
                bare_rates.append((await _bare_many(host, keys, schema))[1])
            else:
                deltas, rate_, cpu = await _navi_many(navi, tap, keys)
                navi_rates.append(rate_)
                cpu_per_delta.append(cpu / deltas * 1e6)
    figures = {"bare": statistics.median(bare_rates), "navi": statistics.median(navi_rates),
               "cpu_us": statistics.median(cpu_per_delta)}
    print(f"(e{tag}) {sessions} sessions x {E_DELTAS} deltas at once, median of {rounds} rounds (sides alternating):")
    print(f"    bare ollama clients {figures['bare']:9.0f} deltas/s   rounds: {', '.join(f'{x:.0f}' for x in bare_rates)}")
    print(f"    through Navi        {figures['navi']:9.0f} deltas/s   rounds: {', '.join(f'{x:.0f}' for x in navi_rates)}")
    print(f"    Navi server CPU     {figures['cpu_us']:9.1f} us/delta  rounds: {', '.join(f'{x:.1f}' for x in cpu_per_delta)}")
    return figures


async def part_f(navi, host: str, tap: Path, sessions: int, starts: int, tag: str = "", schema: dict | None = None) -> dict:
    """The new runs start from a process of their own, as they would from other people's
    browsers: a client starting twenty runs (or making twenty ollama clients, 50 ms of CPU
    each) would otherwise stall this process's own reading, and the lag measured would be the
    bench client's, on both sides."""
    async def scenario(side: str) -> list[float]:
        paced = [f"bench-f-paced {side}{tag} #{j}" for j in range(sessions)]
        started = [f"bench-f-start {side}{tag} #{j}" for j in range(starts)]
        if side == "navi":
            sids = [await asyncio.to_thread(navi.create_session) for _ in paced + started]
            streams = [asyncio.create_task(navi_stream(navi, sid, key, wall=True)) for sid, key in zip(sids, paced)]
            job = {"side": side, "starts": [[navi.ws_url(sid), key] for sid, key in zip(sids[sessions:], started)],
                   "headers": navi.headers}
        else:
            streams = [asyncio.create_task(bare_stream(host, key, wall=True, schema=schema)) for key in paced]
            job = {"side": side, "host": host, "starts": started, "schema": schema}
        starter = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--starter", cwd=ROOT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        starter.stdin.write(json.dumps(job).encode() + b"\n")
        await starter.stdin.drain()
        if (await starter.stdout.readline()).strip() != b"ready":
            raise RuntimeError("the starter process did not start")
        await asyncio.sleep(0.5)  # the paced streams are flowing: now the new runs start
        starter.stdin.write(b"go\n")
        await starter.stdin.drain()
        done = (await starter.stdout.readline()).strip()
        await starter.wait()
        if done != b"done":
            raise RuntimeError(f"the starter process failed: {done!r}")
        results = await asyncio.gather(*streams)
        records = await tap_records(tap, paced)
        lags: list[float] = []
        for key, (_, got) in zip(paced, results):
            if side == "navi":
                lags += navi_lags(records[key], got)
            else:
                lags += [(received - written) * 1000 for received, written in zip(got, records[key]["times"])]
        return lags

    bare, through = await scenario("bare"), await scenario("navi")
    figures = {"bare": pct(bare, 99), "navi": pct(through, 99)}
    print(f"(f{tag}) {sessions} streams paced 50 ms a piece while {starts} new runs start, lag ms p50 / p99 / max:")
    print(f"    bare ollama clients {pct(bare, 50):6.1f} / {figures['bare']:6.1f} / {max(bare):6.1f}")
    print(f"    through Navi        {pct(through, 50):6.1f} / {figures['navi']:6.1f} / {max(through):6.1f}")
    return figures


async def starter() -> None:
    """Part (f)'s other clients: reads its job, says ready, and on "go" starts every run at once
    and streams each to its end."""
    import websockets

    lines = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
    job = json.loads(await lines.readline())

    async def navi_run(url: str, key: str) -> None:
        async with websockets.connect(url, additional_headers=job["headers"], max_size=None, max_queue=None) as ws:
            await ws.send(json.dumps({"type": "message", "content": key}))
            while (frame := json.loads(await asyncio.wait_for(ws.recv(), 120)))["type"] not in ("stream_end", "stream_stopped", "error"):
                pass
            if frame["type"] != "stream_end":
                raise RuntimeError(f"run ended with {frame}")

    print("ready", flush=True)
    await lines.readline()
    if job["side"] == "navi":
        await asyncio.gather(*(navi_run(url, key) for url, key in job["starts"]))
    else:
        await asyncio.gather(*(bare_stream(job["host"], key, schema=job["schema"]) for key in job["starts"]))
    print("done", flush=True)


def print_table(boot: dict, by_mode: dict[str, tuple[dict, dict, dict]]) -> None:
    """The hot-path table: the bare client and each Navi profile mode measured in this run."""
    modes = list(by_mode)
    first = by_mode[modes[0]]
    rows = [("Navi's work before the LLM request, p50", ["-"] + [f"{by_mode[m][0]['before']:.1f} ms" for m in modes], "<= 3 ms"),
            ("first delta after send, p50", [f"{first[0]['bare']:.1f} ms"] +
             [f"{by_mode[m][0]['navi']:.1f} ms (bare {by_mode[m][0]['bare']:.1f})" for m in modes], "<= bare + 3 ms"),
            (f"{F_SESSIONS} paced streams while {F_STARTS} runs start, lag p99", [f"{first[2]['bare']:.1f} ms"] +
             [f"{by_mode[m][2]['navi']:.1f} ms (bare {by_mode[m][2]['bare']:.1f})" for m in modes], "<= bare + 5 ms"),
            ("server CPU per delta relayed", ["-"] + [f"{by_mode[m][1]['cpu_us']:.1f} us" for m in modes], "<= 10 us"),
            (f"{E_SESSIONS} x {E_DELTAS} deltas at once, deltas/s", [f"{first[1]['bare'] / 1000:.1f}k"] +
             [f"{by_mode[m][1]['navi'] / 1000:.1f}k ({by_mode[m][1]['navi'] / by_mode[m][1]['bare']:.2f}x bare)" for m in modes],
             ">= 0.9x"),
            ("LLM requests before the first word, plain message (new chat)", ["1"] +
             [f"{by_mode[m][0]['calls']:.2f}" for m in modes], "1"),
            ("idle RSS / boot", ["-"] + [f"{boot['rss']:.0f} MiB / {boot['boot']:.2f} s"] * len(modes), "<= 120 MiB / <= 1.5 s")]
    print("\n| figure | bare client | " + " | ".join(f"Navi {m}" for m in modes) + " | goal |")
    print("|---|---|" + "---|" * len(modes) + "---|")
    for name, cells, goal in rows:
        print(f"| {name} | " + " | ".join(cells) + f" | {goal} |")


async def main(quick: bool, only_table: bool, modes: list[str]) -> None:
    from tests.live_server import LiveNavi

    workdir = Path(tempfile.mkdtemp(prefix="navi-bench-"))
    llm, host, tap = start_llm(workdir, quick)
    navi = LiveNavi(env={"OLLAMA_HOST": host, "LOG_LEVEL": "ERROR"})
    try:
        navi.prepare()
        navi._manage("shell", "-c", "from agent.models import Profile; Profile.objects.update(planning_enabled=False)")
        started = time.perf_counter()
        navi.start(poll=0.005)
        boot = {"boot": time.perf_counter() - started}
        await asyncio.sleep(1.0)  # idle: nothing has run yet
        boot["rss"] = rss_mib(navi.proc.pid)
        print(f"(g) boot {boot['boot']:.2f} s (start -> first /health 200), idle RSS {boot['rss']:.0f} MiB")
        await navi_stream(navi, await asyncio.to_thread(navi.create_session), "bench-b warm-up")
        await bare_stream(host, "bench-b warm-up")
        if not only_table:
            await part_a(navi, host, 2 if quick else 5)
            await part_b(navi, host, 10 if quick else 30)
            sessions = 10 if quick else MANY_SESSIONS
            await part_c(navi, tap, "bench-c-paced", sessions)
            await part_c(navi, tap, "bench-c-burst", sessions)
        by_mode = {}
        for mode in modes:  # the profile's tool_calling: `auto` (constrained here, the server honours `format`)
            navi._manage("shell", "-c", f"from agent.models import Profile; Profile.objects.update(tool_calling={mode!r})")
            await navi_stream(navi, await asyncio.to_thread(navi.create_session), f"bench-b warm-up {mode}")
            tag = f" {mode}"
            schema = ANSWER_SCHEMA if mode != "native" else None  # the bare client reads the same bytes
            d = await part_d(navi, host, tap, 10 if quick else 30, tag, schema)
            e = await part_e(navi, host, tap, 2 if quick else E_ROUNDS, 5 if quick else E_SESSIONS, tag, schema)
            f = await part_f(navi, host, tap, F_SESSIONS, F_STARTS, tag, schema)
            by_mode[mode] = (d, e, f)
        print_table(boot, by_mode)
    finally:
        navi.stop()
        llm.terminate()
        llm.wait(timeout=10)
        import shutil

        shutil.rmtree(navi.data_dir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-llm":
        serve_llm(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "--starter":
        asyncio.run(starter())
    else:
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--quick", action="store_true", help="fewer rounds and sessions (a smoke run)")
        parser.add_argument("--table", action="store_true", help="only the hot-path table, parts (d)-(g)")
        parser.add_argument("--modes", default="auto,native", help="the profile's tool_calling modes to measure, in order")
        args = parser.parse_args()
        asyncio.run(main(args.quick, args.table, args.modes.split(",")))
