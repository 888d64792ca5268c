"""`python -m navi_project.cluster` (make run-cluster): Redis + two workers behind nginx, driven
by 100 concurrent chat sessions through the proxy — plain runs, reconnects mid-stream (resume
by URL and by `resume` frame, landing on whichever worker nginx picks) and stops (REST and
WebSocket). Every answer complete, nothing duplicated, nothing lost: checked on the frames' seq
numbering, on the saved messages, and on the cluster-wide /metrics totals.

The database is a shared SQLite file, or a fresh database on the PostgreSQL server that
`DATABASE_URL` points at when it is a postgres:// URL.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time

import httpx
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from tests import redis_server
from tests.live_cluster import cluster_database, nginx_available, wait_until_healthy
from tests.live_server import ROOT, LiveNavi, free_port
from tests.live_ws import TERMINAL, deltas, seqs, summarise
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.live

SESSIONS = int(os.environ.get("NAVI_CLUSTER_TEST_SESSIONS", "100"))  # fewer only to debug by hand
METRICS_TOKEN = "cluster-test-metrics-token"
TIMEOUT = 90  # per wait; the machine may be busy with 100 streams and two other suites


def story(i: int) -> str:
    return "".join(f"<{i:03d}.{k:02d}> " for k in range(24))  # 24 chunks of 8: still running at a resume


def long_story(i: int) -> str:
    return "".join(f"[{i:03d}.{k:03d}] " for k in range(300))  # stopped long before the end


# --- the cluster -----------------------------------------------------------------------------
class Proxy:
    """The cluster as a client sees it: one address (nginx) and the owner's token."""

    def __init__(self, port: int, token: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.ws = f"ws://127.0.0.1:{port}"
        self.headers = {"Authorization": f"Bearer {token}"}

    def connect(self, session_id: str, query: str = ""):
        url = f"{self.ws}/ws/sessions/{session_id}" + (f"?{query}" if query else "")
        return websockets.connect(url, additional_headers=self.headers, max_size=None, max_queue=None, open_timeout=TIMEOUT)


@pytest.fixture(scope="module")
def cluster(llm_live, tmp_path_factory):
    if not nginx_available():
        pytest.skip("nginx is not installed; `apt-get install nginx` (.ci/run does this)")
    if not redis_server.available():
        pytest.skip("redis-server is not installed; `apt-get install redis-server` (.ci/run does this)")
    data_dir = tmp_path_factory.mktemp("cluster-data")
    run_dir = tmp_path_factory.mktemp("cluster-run")
    with cluster_database(data_dir) as database_url:
        navi = LiveNavi(env={"OLLAMA_HOST": llm_live.url, "DATABASE_URL": database_url, "METRICS_TOKEN": METRICS_TOKEN},
                        data_dir=data_dir)
        navi.prepare()  # migrate, owner, token: what `make run-cluster` does before starting
        port, worker_ports = free_port(), [free_port(), free_port()]
        log = open(run_dir / "cluster.log", "wb")
        env = {k: v for k, v in navi.env.items() if k not in ("REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "navi_project.cluster", "--workers", "2", "--port", str(port),
             "--worker-ports", ",".join(map(str, worker_ports)), "--run-dir", str(run_dir)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        proxy = Proxy(port, navi.token)
        try:
            wait_until_healthy(proxy.url, proc, run_dir / "cluster.log")
            yield proxy, proc, worker_ports, run_dir
        finally:
            if proc.poll() is None:  # the test did not get to stop it: stop it as Ctrl-C would
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)  # its children get SIGTERM (PDEATHSIG)
                    proc.wait(timeout=30)
            log.close()
            print(f"--- cluster log ---\n{(run_dir / 'cluster.log').read_text(errors='replace')[-6000:]}")


# --- one client --------------------------------------------------------------------------------
async def recv_until(ws, predicate) -> list[dict]:
    frames: list[dict] = []
    while True:
        try:
            frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        except TimeoutError:
            raise AssertionError(f"no frame for {TIMEOUT} s after {summarise(frames)}") from None
        frames.append(frame)
        assert frame["type"] != "resume_unavailable", f"a live run's replay was refused after {summarise(frames)}"
        if predicate(frame):
            return frames


def run_over(frame: dict) -> bool:
    return frame["type"] in TERMINAL and "run_id" in frame


def delta_at_least(seq: int):
    return lambda f: f["type"] == "stream_delta" and f["seq"] >= seq


def assert_run_frames(frames: list[dict], first: int = 1) -> None:
    got = seqs(frames)
    assert got == list(range(first, first + len(got))), f"seqs not contiguous from {first}: {got}"
    assert len({f["run_id"] for f in frames if "run_id" in f}) == 1, "frames of several runs mixed"


def dedup_like_the_page(before: list[dict], after: list[dict]) -> list[dict]:
    """What static/js/ws.js shows after a reconnect: frames of the run with a seq it already
    has are dropped. A dropped frame must be the very frame it already had."""
    by_seq = {f["seq"]: f for f in before if "seq" in f}
    shown = list(before)
    for frame in after:
        if "seq" not in frame:
            continue
        if frame["seq"] in by_seq:
            assert frame == by_seq[frame["seq"]], f"seq {frame['seq']} came twice with different content"
            continue
        by_seq[frame["seq"]] = frame
        shown.append(frame)
    return shown


async def create_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/sessions", json={"profile_id": "secretary", "new": True})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


async def drive(proxy: Proxy, client: httpx.AsyncClient, i: int) -> dict:
    """One session of kind i % 10: 0-3 plain, 4-5 resume by URL, 6 resume frame, 7-9 stop."""
    kind = ["plain"] * 4 + ["resume_url", "resume_url", "resume_frame"] + ["stop_rest", "stop_rest", "stop_ws"]
    kind = kind[i % 10]
    sid = await create_session(client)
    text = f"session {i:03d} " + ("ramble on" if kind.startswith("stop") else "tell the story")
    message = json.dumps({"type": "message", "content": text})
    sockets = 1
    async with proxy.connect(sid) as ws:
        await ws.send(message)
        if kind == "plain":
            frames = await recv_until(ws, run_over)
            assert_run_frames(frames)
        elif kind.startswith("resume"):
            head = await recv_until(ws, delta_at_least(4))
        else:
            head = await recv_until(ws, delta_at_least(3))
            if kind == "stop_ws":
                await ws.send(json.dumps({"type": "stop"}))
            else:
                response = await client.post(f"/sessions/{sid}/stop")
                assert response.json() == {"ok": True}, response.text
            frames = head + await recv_until(ws, run_over)
            assert frames[-1]["type"] == "stream_stopped", frames[-1]
            assert_run_frames(frames)
    if kind.startswith("resume"):  # the socket dropped mid-stream; reconnect through the proxy
        run_id, k = head[0]["run_id"], head[-1]["seq"]
        sockets += 1
        if kind == "resume_url":
            async with proxy.connect(sid, f"run_id={run_id}&after_seq={k}") as ws:
                tail = await recv_until(ws, run_over)
            assert_run_frames(tail, first=k + 1)  # exactly the rest, once
            frames = head + tail
        else:
            async with proxy.connect(sid) as ws:
                await ws.send(json.dumps({"type": "resume", "run_id": run_id, "after_seq": k}))
                tail = await recv_until(ws, run_over)
            frames = dedup_like_the_page(head, tail)
        assert_run_frames(frames)
        assert frames[-1]["type"] == "stream_end", frames[-1]
    if kind.startswith("stop"):
        assert long_story(i).startswith(deltas(frames)), "a stopped answer that is not a prefix of its story"
    else:
        assert frames[-1]["type"] == "stream_end", frames[-1]
        assert deltas(frames) == story(i) and frames[-1]["content"] == story(i)
    return {"i": i, "kind": kind, "sid": sid, "run_id": frames[0]["run_id"], "shown": deltas(frames),
            "sockets": sockets, "text": text}


async def saved_messages(client: httpx.AsyncClient, sid: str) -> list[dict]:
    response = await client.get(f"/sessions/{sid}")
    assert response.status_code == 200, response.text
    return response.json()["messages"]


def check_saved(result: dict, messages: list[dict]) -> None:
    i, kind = result["i"], result["kind"]
    shape = [(m["role"], m["status"]) for m in messages]
    assert [m["content"] for m in messages if m["role"] == "user"] == [result["text"]], "the message saved more than once"
    if kind.startswith("stop"):
        assert shape == [("user", "complete"), ("assistant", "interrupted"), ("system", "interrupted")], shape
        saved = messages[1]["content"]
        assert saved and long_story(i).startswith(saved)
        assert saved == result["shown"], f"saved {len(saved)} chars, the client was shown {len(result['shown'])}"
    else:
        assert shape == [("user", "complete"), ("assistant", "complete")], shape
        assert messages[1]["content"] == story(i)


async def scrape(proxy: Proxy) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(f"{proxy.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200, response.text
    return {s.name: s.value for f in text_string_to_metric_families(response.text) for s in f.samples if not s.labels}


# --- the test ------------------------------------------------------------------------------------
async def test_100_sessions_through_nginx_with_resumes_and_stops(cluster, live_llm) -> None:
    proxy, proc, worker_ports, run_dir = cluster
    # The cluster's job worker (JOB_WORKERS, 1) indexes an upload made through nginx; the web
    # workers run none of their own.
    async with httpx.AsyncClient(base_url=proxy.url, headers=proxy.headers, timeout=TIMEOUT) as client:
        document = (await client.post("/knowledge", files={"file": ("note.txt", b"The cluster indexes notes.")})).json()
        deadline = time.monotonic() + TIMEOUT
        while document["status"] in ("queued", "indexing") and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            document = (await client.get(f"/knowledge/{document['id']}")).json()
        assert document["status"] == "ready", document
        assert (await client.get("/health")).json()["jobs"]["workers"] == 1
    # 2 deltas/s per session, ~200 frames/s through Redis in all: what a busy 2-core CI machine
    # relays without falling behind (bench/cluster.py measures the limits). Faster streams
    # would only test the machine: a stream that ends before its stop arrives proves nothing.
    for i in range(SESSIONS):
        live_llm.add_rule(Rule(match=f"session {i:03d} tell the story",
                               turns=[Turn(content=story(i), chunk_size=8, delay=0.5)]))
        live_llm.add_rule(Rule(match=f"session {i:03d} ramble on",
                               turns=[Turn(content=long_story(i), chunk_size=10, delay=0.5)]))
    limits = httpx.Limits(max_connections=SESSIONS, max_keepalive_connections=SESSIONS)
    async with httpx.AsyncClient(base_url=proxy.url, headers=proxy.headers, timeout=TIMEOUT, limits=limits) as client:
        t0 = time.monotonic()
        results = await asyncio.gather(*(drive(proxy, client, i) for i in range(SESSIONS)))
        print(f"\n{SESSIONS} sessions through nginx in {time.monotonic() - t0:.1f} s")
        assert len({r["run_id"] for r in results}) == SESSIONS
        for result, messages in zip(results, await asyncio.gather(*(saved_messages(client, r["sid"]) for r in results))):
            check_saved(result, messages)

    # The cluster's totals, summed over both workers (prometheus-client multiprocess mode).
    # A run's bookkeeping ends just after its last frame, a socket's just after its close: wait
    # until no run and no socket is left.
    deadline = time.monotonic() + TIMEOUT
    totals = await scrape(proxy)
    while (totals["navi_runs_active"] or totals["navi_websocket_connections"]) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        totals = await scrape(proxy)
    stops = sum(r["kind"].startswith("stop") for r in results)
    assert totals["navi_runs_active"] == 0
    assert totals["navi_runs_started_total"] == SESSIONS
    assert totals["navi_runs_stopped_total"] == stops
    assert totals["navi_runs_failed_total"] == 0
    # Sockets the clients got: each counted once by the workers, and answered 101 once by nginx
    # (a handshake a worker gave up on, retried on the other, is neither).
    sockets = sum(r["sockets"] for r in results)
    assert totals["navi_websocket_accepted_total"] == sockets
    assert totals["navi_websocket_connections"] == 0
    upstreams = (run_dir / "access.log").read_text()
    assert sum(" /ws/sessions/" in line and '" 101 ' in line for line in upstreams.splitlines()) == sockets

    # nginx spread the traffic over both workers (no stickiness, no favourite).
    for port in worker_ports:
        assert f"127.0.0.1:{port}" in upstreams, f"worker on {port} got no request"

    # Ctrl-C stops everything cleanly: exit code 0, no worker left listening.
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    for port in worker_ports:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_tls_when_a_host_name_is_set(llm_live, tmp_path) -> None:
    """NAVI_HOST: nginx terminates TLS with the given certificate, the workers trust its
    X-Forwarded-Proto (NAVI_HTTPS), so a wss:// socket from the https origin is accepted."""
    if not (nginx_available() and redis_server.available() and shutil.which("openssl")):
        pytest.skip("needs nginx, redis-server and openssl (`apt-get install nginx redis-server openssl`)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    navi = LiveNavi(env={"OLLAMA_HOST": llm_live.url}, data_dir=tmp_path / "data")
    navi.prepare()
    port, run_dir = free_port(), tmp_path / "run"
    env = {**navi.env, "NAVI_HOST": "localhost", "NAVI_TLS_CERT": str(cert), "NAVI_TLS_KEY": str(key)}
    env.pop("REDIS_URL", None)
    run_dir.mkdir()
    with open(run_dir / "cluster.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "navi_project.cluster", "--workers", "1", "--port", str(port),
             "--worker-ports", str(free_port()), "--run-dir", str(run_dir)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    origin = f"https://localhost:{port}"
    try:
        wait_until_healthy(origin, proc, run_dir / "cluster.log", verify=ssl.create_default_context(cafile=str(cert)))
        with httpx.Client(base_url=origin, verify=ssl.create_default_context(cafile=str(cert)), headers={"Authorization": f"Bearer {navi.token}"}) as client:
            response = client.post("/sessions", json={"new": True})
            assert response.status_code == 201, response.text
            sid = response.json()["session_id"]
            assert client.get("/health").headers["Strict-Transport-Security"].startswith("max-age=")

        async def handshake(origin_header: str) -> dict:
            context = ssl.create_default_context(cafile=str(cert))
            url = f"wss://localhost:{port}/ws/sessions/{sid}"
            headers = {"Authorization": f"Bearer {navi.token}", "Origin": origin_header}
            try:
                async with websockets.connect(url, ssl=context, additional_headers=headers) as ws:
                    await ws.send(json.dumps({"type": "ping"}))
                    return json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
            except websockets.ConnectionClosed as closed:
                return {"closed": closed.rcvd.code if closed.rcvd else None}

        assert asyncio.run(handshake(origin)) == {"type": "pong"}
        assert asyncio.run(handshake(f"http://localhost:{port}")) == {"closed": 4403}  # not its own origin
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
