"""Benchmark: chat sessions per second and first-delta latency through nginx with 1 vs 2 workers.

    .venv/bin/python bench/cluster.py [--sessions 200] [--concurrency 50] [--quick]

Prints figures, asserts nothing. For each worker count, in one run: a fresh database (SQLite,
or a new database on the PostgreSQL server of DATABASE_URL), `python -m navi_project.cluster`
(Redis + N workers + nginx, as `make run-cluster`), and this process as `concurrency` clients
that each create a session, open its WebSocket through nginx, send one message, and read the
answer to `stream_end` — `sessions` times in all. The LLM is the protocol-level test server in
its own process, answering 20 deltas at 50 per second (a small local model's speed), so the
figures are Navi's and the relay's, not a model's.

  sessions/s            sessions completed / wall time of the whole batch
  first delta p50/p99   message sent -> first stream_delta received, per session
  relay lag mean        navi_relay_lag_seconds from /metrics (sum / count over the cluster)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live_cluster import cluster_database, wait_until_healthy  # noqa: E402
from tests.live_server import LiveNavi, free_port  # noqa: E402

ANSWER = "".join(f"w{k:02d} " for k in range(20))  # 20 deltas of 4 characters
METRICS_TOKEN = "bench-metrics"


def start_llm(workdir: Path) -> tuple[subprocess.Popen, str]:
    rules = [
        {"match": "", "system": "planning step", "turns": [{"content": "DIRECT"}]},
        {"match": "bench", "turns": [{"content": ANSWER, "chunk_size": 4, "delay": 0.02}]},
    ]
    path = workdir / "rules.json"
    path.write_text(json.dumps(rules))
    proc = subprocess.Popen([sys.executable, "-m", "tests.llm_server", "--rules", str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("LISTENING "):
        raise SystemExit(f"the test LLM server did not start: {line!r}")
    return proc, line.split()[1]


class Proxy:
    def __init__(self, port: int, token: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.ws = f"ws://127.0.0.1:{port}"
        self.headers = {"Authorization": f"Bearer {token}"}


async def one_session(proxy: Proxy, client, i: int) -> float:
    """Seconds from sending the message to the first stream_delta; the answer is read to its end."""
    import websockets

    response = await client.post("/sessions", json={"profile_id": "secretary", "new": True})
    response.raise_for_status()
    sid = response.json()["session_id"]
    async with websockets.connect(f"{proxy.ws}/ws/sessions/{sid}", additional_headers=proxy.headers,
                                  max_size=None, max_queue=None, open_timeout=120) as ws:
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "message", "content": f"bench {i}"}))
        first = None
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 120))
            if frame["type"] == "stream_delta" and first is None:
                first = time.perf_counter() - t0
            if frame["type"] in ("stream_end", "stream_stopped", "error") and "run_id" in frame:
                if frame["type"] != "stream_end":
                    raise RuntimeError(f"session {i}: {frame}")
                return first if first is not None else time.perf_counter() - t0


async def batch(proxy: Proxy, sessions: int, concurrency: int) -> tuple[float, list[float]]:
    import httpx

    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=proxy.url, headers=proxy.headers, timeout=120, limits=limits) as client:

        async def gated(i: int) -> float:
            async with gate:
                return await one_session(proxy, client, i)

        t0 = time.perf_counter()
        firsts = await asyncio.gather(*(gated(i) for i in range(sessions)))
        return time.perf_counter() - t0, firsts


def relay_lag_mean(proxy: Proxy) -> float:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{proxy.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30).text
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}
    count = values.get("navi_relay_lag_seconds_count", 0)
    return values.get("navi_relay_lag_seconds_sum", 0) / count if count else 0.0


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def run_with(workers: int, llm_url: str, sessions: int, concurrency: int) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="navi-bench-cluster-"))
    with cluster_database(data_dir) as database_url:
        navi = LiveNavi(env={"OLLAMA_HOST": llm_url, "DATABASE_URL": database_url, "METRICS_TOKEN": METRICS_TOKEN},
                        data_dir=data_dir)
        navi.prepare()
        port = free_port()
        ports = [free_port() for _ in range(workers)]
        env = {k: v for k, v in navi.env.items() if k not in ("REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
        log = open(data_dir / "cluster.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "navi_project.cluster", "--workers", str(workers), "--port", str(port),
             "--worker-ports", ",".join(map(str, ports)), "--run-dir", str(data_dir / "run")],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        proxy = Proxy(port, navi.token)
        try:
            wait_until_healthy(proxy.url, proc, data_dir / "cluster.log")
            asyncio.run(batch(proxy, min(concurrency, sessions), concurrency))  # warm-up: imports, connections
            wall, firsts = asyncio.run(batch(proxy, sessions, concurrency))
            lag = relay_lag_mean(proxy)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
            log.close()
    return {"workers": workers, "rate": sessions / wall, "wall": wall, "p50": p(firsts, 50), "p99": p(firsts, 99),
            "lag_ms": lag * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="60 sessions, 20 at a time")
    args = ap.parse_args()
    sessions, concurrency = (60, 20) if args.quick else (args.sessions, args.concurrency)
    workdir = Path(tempfile.mkdtemp(prefix="navi-bench-llm-"))
    llm, llm_url = start_llm(workdir)
    try:
        database = "PostgreSQL" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "SQLite"
        print(f"{sessions} sessions, {concurrency} at a time, through nginx; {database}; "
              f"answer = 20 deltas at 50/s; cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
        print(f"{'workers':>7} {'sessions/s':>10} {'wall s':>7} {'first delta p50':>16} {'p99':>8} {'relay lag mean':>15}")
        for workers in (1, 2):
            r = run_with(workers, llm_url, sessions, concurrency)
            print(f"{r['workers']:>7} {r['rate']:>10.1f} {r['wall']:>7.1f} {r['p50'] * 1000:>13.0f} ms "
                  f"{r['p99'] * 1000:>5.0f} ms {r['lag_ms']:>12.1f} ms", flush=True)
    finally:
        llm.send_signal(signal.SIGTERM)
        llm.wait(timeout=30)


if __name__ == "__main__":
    main()
