"""Benchmark: how fast and how promptly Navi relays a streaming answer to a WebSocket client.

    .venv/bin/python bench/stream_relay.py [--quick]

Prints figures, asserts nothing. Set-up: the protocol-level test LLM server runs in its own
process (`tests.llm_server`, wrapped here only to record when it writes each chunk), one real
Navi server (daphne, in-memory channel layer, planning disabled), and this process as the
client. Parts:

  (a) deltas/s one WebSocket client receives through Navi vs the bare `ollama.AsyncClient`
      against the same server in the same run (server streams 1 char per chunk, no delay).
  (b) first-delta latency Navi adds: WS `message` sent -> first `stream_delta`, minus the bare
      client's call -> first chunk; paired runs, p50/p95.
  (c) 50 concurrent sessions x 1 000 deltas: total deltas/s and delivery lag (client receive
      time - the time the LLM server wrote that chunk, both `time.time()` on this machine),
      once paced like a fast model (10 ms per chunk per session) and once unpaced (burst).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
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


# --- the LLM server process, with an emission tap -----------------------------------------------
def serve_llm(rules: str, tap: str) -> None:
    """`tests.llm_server` main(), plus a JSON line per stream: its user message and chunk times."""
    from tests import llm_server as ls

    lock, out = threading.Lock(), open(tap, "a", encoding="utf-8")
    original_ollama, original_stream = ls._Handler._ollama, ls._Handler._stream

    def ollama(self, body, model, turn):
        users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
        self._tap_key = ls._text(users[-1].get("content")) if users else ""
        return original_ollama(self, body, model, turn)

    def stream(self, turn, ctype, frames, tail):
        times: list[float] = []

        def tapped():
            for frame in frames:
                times.append(time.time())
                yield frame

        try:
            original_stream(self, turn, ctype, tapped(), tail)
        finally:
            with lock:
                out.write(json.dumps({"key": getattr(self, "_tap_key", ""), "times": times}) + "\n")
                out.flush()

    ls._Handler._ollama, ls._Handler._stream = ollama, stream
    ls.main(["--port", "0", "--rules", rules])


def start_llm(workdir: Path, quick: bool) -> tuple[subprocess.Popen, str, Path]:
    text = "abcdefghij" * (BIG // 10)
    many = "0123456789" * (MANY_DELTAS // 10)
    rules = [
        {"match": "bench-a", "turns": [{"content": text, "chunk_size": 1}]},
        {"match": "bench-b", "turns": [{"content": "hi there", "chunk_size": 1}]},
        {"match": "bench-c-paced", "turns": [{"content": many, "chunk_size": 1, "delay": 0.01}]},
        {"match": "bench-c-burst", "turns": [{"content": many, "chunk_size": 1}]},
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
    result = {}
    for line in tap.read_text().splitlines():
        record = json.loads(line)
        result[record["key"]] = record["times"]
    return result


# --- clients ------------------------------------------------------------------------------------
async def bare_stream(host: str, content: str) -> tuple[float, list[float]]:
    """(time of the call, receive time of every content chunk) with the plain ollama client."""
    import ollama

    client = ollama.AsyncClient(host=host)
    t0 = time.perf_counter()
    stamps = []
    async for part in await client.chat(
        model="fake-llm:latest", messages=[{"role": "user", "content": content}], stream=True
    ):
        if part.message.content:
            stamps.append(time.perf_counter())
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
        assert "".join(d for _, d in got) == "abcdefghij" * (BIG // 10), "Navi lost or reordered deltas"
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
    start = time.time()
    results = await asyncio.gather(
        *(navi_stream(navi, sid, key, wall=True) for sid, key in zip(sids, keys)), return_exceptions=True
    )
    elapsed = time.time() - start
    errors = [r for r in results if isinstance(r, BaseException)]
    emitted = read_tap(tap)
    lags, total = [], 0
    for key, result in zip(keys, results):
        if isinstance(result, BaseException):
            continue
        offset = 0
        for received, delta in result[1]:
            offset += len(delta)
            lags.append((received - emitted[key][offset - 1]) * 1000)
        total += offset
    first = min(min(emitted[k]) for k in keys if k in emitted)
    last_rx = max(r[1][-1][0] for r in results if not isinstance(r, BaseException) and r[1])
    print(f"(c) {sessions} sessions x {MANY_DELTAS} deltas, {label}: {len(errors)} errors"
          + (f" (first: {errors[0]!r})" if errors else ""))
    print(f"    delivered {total} deltas in {elapsed:.2f} s -> {total / (last_rx - first):.0f} deltas/s total")
    print(f"    delivery lag ms: p50 {pct(lags, 50):.1f}  p95 {pct(lags, 95):.1f}  p99 {pct(lags, 99):.1f}"
          f"  max {max(lags):.1f}   (target p99 <= 250 ms)")


async def main(quick: bool) -> None:
    from tests.live_server import LiveNavi

    workdir = Path(tempfile.mkdtemp(prefix="navi-bench-"))
    llm, host, tap = start_llm(workdir, quick)
    navi = LiveNavi(env={"OLLAMA_HOST": host, "LOG_LEVEL": "ERROR"})
    try:
        navi.prepare()
        navi._manage("shell", "-c", "from agent.models import Profile; Profile.objects.update(planning_enabled=False)")
        navi.start()
        await navi_stream(navi, await asyncio.to_thread(navi.create_session), "bench-b warm-up")
        await bare_stream(host, "bench-b warm-up")
        await part_a(navi, host, 2 if quick else 5)
        await part_b(navi, host, 10 if quick else 30)
        sessions = 10 if quick else MANY_SESSIONS
        await part_c(navi, tap, "bench-c-paced", sessions)
        await part_c(navi, tap, "bench-c-burst", sessions)
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
    else:
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--quick", action="store_true", help="fewer rounds and 10 sessions (a smoke run)")
        asyncio.run(main(parser.parse_args().quick))
