"""Benchmark: chat sessions per second, first-delta latency and frame lag through nginx with 1 vs 2
workers, on SQLite and PostgreSQL.

    .venv/bin/python bench/cluster.py [--sessions 200] [--concurrency 50] [--quick]
                                      [--databases sqlite,postgres] [--workers 1,2] [--no-pool]

Prints figures, asserts nothing. For each worker count, in one run: a fresh database (SQLite,
or a new database on the PostgreSQL server of DATABASE_URL), `python -m navi_project.cluster`
(Redis + N workers + nginx, as `make run-cluster`), and this process as `concurrency` clients
that each create a session, open its WebSocket through nginx, send one message, and read the
answer to `stream_end` — `sessions` times in all. The LLM is the protocol-level test server in
its own process, answering 20 deltas at 50 per second (a small local model's speed), so the
figures are Navi's and the relay's, not a model's.

  sessions/s            sessions completed / wall time of the whole batch
  first delta p50/p99   message sent -> first stream_delta received, per session
  frame lag p50/p99     each later stream_delta: how far behind the model's pace it arrived (its
                        newest piece was sent k * 20 ms after the first; lag = arrival - first
                        delta's arrival - k * 20 ms), over every delta of every session
  relay lag mean        navi_relay_lag_seconds from /metrics (sum / count over the cluster)
  DB conns              PostgreSQL: connections opened to the cluster's database during the
                        batch (pg_stat_database.sessions); SQLite: handles on the database file
                        the workers hold at the end (kept connections, never reopened)

PostgreSQL is the server of DATABASE_URL, else a throwaway cluster (tests/postgres_cluster.py).
`--no-pool` sets DB_POOL_MAX_SIZE=0 (Django's default: a connection per request / socket event).
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
from contextlib import contextmanager
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


PIECE_S = 0.02  # the LLM's delay between pieces of 4 characters (start_llm)


async def one_session(proxy: Proxy, client, i: int, lags: list[float]) -> float:
    """Seconds from sending the message to the first stream_delta; the answer is read to its end,
    each later delta's lag behind the model's pace appended to `lags`."""
    import websockets

    response = await client.post("/sessions", json={"profile_id": "secretary", "new": True})
    response.raise_for_status()
    sid = response.json()["session_id"]
    async with websockets.connect(f"{proxy.ws}/ws/sessions/{sid}", additional_headers=proxy.headers,
                                  max_size=None, max_queue=None, open_timeout=120) as ws:
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "message", "content": f"bench {i}"}))
        first = None
        shown = ""
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 120))
            if frame["type"] == "stream_delta":
                now = time.perf_counter()
                shown += frame["delta"]
                newest = len(shown) // 4 - 1  # index of the newest 4-character piece received
                if first is None:
                    first, first_at, first_piece = now - t0, now, newest
                else:
                    lags.append(max(0.0, now - first_at - (newest - first_piece) * PIECE_S))
            if frame["type"] in ("stream_end", "stream_stopped", "error") and "run_id" in frame:
                if frame["type"] != "stream_end":
                    raise RuntimeError(f"session {i}: {frame}")
                return first if first is not None else time.perf_counter() - t0


async def batch(proxy: Proxy, sessions: int, concurrency: int, lags: list[float] | None = None) -> tuple[float, list[float]]:
    import httpx

    lags = [] if lags is None else lags

    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=proxy.url, headers=proxy.headers, timeout=120, limits=limits) as client:

        async def gated(i: int) -> float:
            async with gate:
                return await one_session(proxy, client, i, lags)

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


def pg_sessions(database_url: str) -> int | None:
    """Connections ever opened to this PostgreSQL database (PostgreSQL 14+), else None."""
    if not database_url.startswith(("postgres://", "postgresql://")):
        return None
    import psycopg

    base, _, name = database_url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        row = conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", [name]).fetchone()
    return int(row[0]) if row else None


def sqlite_handles(cluster_pid: int, db_file: str) -> int:
    """Open handles on the SQLite file (and its WAL) in the cluster's worker processes."""
    count = 0
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) != cluster_pid:
                continue
            count += sum(1 for fd in (proc / "fd").iterdir() if os.readlink(fd) == db_file)
        except OSError:
            continue
    return count


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
            before = pg_sessions(database_url)
            lags: list[float] = []
            wall, firsts = asyncio.run(batch(proxy, sessions, concurrency, lags))
            after = pg_sessions(database_url)
            lag = relay_lag_mean(proxy)
            if before is not None and after is not None:
                conns = after - before
            else:
                conns = sqlite_handles(proc.pid, database_url.removeprefix("sqlite:///"))
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
            log.close()
    return {"workers": workers, "rate": sessions / wall, "wall": wall, "p50": p(firsts, 50), "p99": p(firsts, 99),
            "lag_ms": lag * 1000, "frame_p50": p(lags, 50), "frame_p99": p(lags, 99), "conns": conns}


@contextmanager
def database(kind: str, pool: bool):
    """DATABASE_URL for `kind` in the environment while the runs use it."""
    saved = {k: os.environ.get(k) for k in ("DATABASE_URL", "DB_POOL_MAX_SIZE")}
    try:
        if not pool:
            os.environ["DB_POOL_MAX_SIZE"] = "0"
        if kind == "sqlite":
            os.environ.pop("DATABASE_URL", None)
            yield "SQLite"
        elif saved["DATABASE_URL"] and saved["DATABASE_URL"].startswith(("postgres://", "postgresql://")):
            yield "PostgreSQL" + ("" if pool else ", no pool")
        else:
            from tests.postgres_cluster import find_bin_dir, throwaway_cluster

            bin_dir = find_bin_dir()
            if bin_dir is None:
                raise SystemExit("PostgreSQL is not installed (apt-get install postgresql) and DATABASE_URL is unset")
            with throwaway_cluster(bin_dir) as url:
                os.environ["DATABASE_URL"] = url
                yield "PostgreSQL" + ("" if pool else ", no pool")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="60 sessions, 20 at a time")
    ap.add_argument("--databases", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--no-pool", action="store_true", help="PostgreSQL without the connection pool")
    args = ap.parse_args()
    sessions, concurrency = (60, 20) if args.quick else (args.sessions, args.concurrency)
    workdir = Path(tempfile.mkdtemp(prefix="navi-bench-llm-"))
    llm, llm_url = start_llm(workdir)
    try:
        print(f"{sessions} sessions, {concurrency} at a time, through nginx; "
              f"answer = 20 deltas at 50/s; cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
        print(f"{'database':<24} {'workers':>7} {'sessions/s':>10} {'wall s':>7} {'first delta p50':>16} {'p99':>8} "
              f"{'frame lag p50':>14} {'p99':>8} {'relay lag mean':>15} {'DB conns':>9}")
        for kind in [d.strip() for d in args.databases.split(",") if d.strip()]:
            with database(kind, pool=not args.no_pool) as label:
                for workers in [int(w) for w in args.workers.split(",") if w]:
                    r = run_with(workers, llm_url, sessions, concurrency)
                    print(f"{label:<24} {r['workers']:>7} {r['rate']:>10.1f} {r['wall']:>7.1f} {r['p50'] * 1000:>13.0f} ms "
                          f"{r['p99'] * 1000:>5.0f} ms {r['frame_p50'] * 1000:>11.0f} ms {r['frame_p99'] * 1000:>5.0f} ms "
                          f"{r['lag_ms']:>12.1f} ms {r['conns']:>9}", flush=True)
    finally:
        llm.send_signal(signal.SIGTERM)
        llm.wait(timeout=30)


if __name__ == "__main__":
    main()
