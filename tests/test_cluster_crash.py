"""`python -m navi_project.cluster` when a worker dies: kill -9 one worker mid-answer and the
cluster goes on. The other worker keeps serving (its own answer streams to the end), the dead one
is started again, and the answer the dead worker was writing is finished by whoever reaps it:
kept as `interrupted` with its text, the chat no longer running, the sockets watching told.
A worker that dies again and again right after its start is given up on, loudly.

Real processes throughout: nginx, Redis, two daphne workers, the protocol-level test LLM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import websockets

from tests import redis_server
from tests.live_cluster import cluster_database, nginx_available, wait_until_healthy
from tests.live_server import PYTHON, ROOT, LiveNavi, free_port
from tests.live_ws import recv_run, recv_until
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.live

TIMEOUT = 120  # the dead run's claim lapses after 30 s; the reaper looks every 10 s
CRASHED = "".join(f"<c{k:03d}> " for k in range(200))  # 0.5 s a chunk: still streaming when killed
SURVIVOR = "".join(f"<s{k:02d}> " for k in range(40))  # streams on across the kill, ~10 s


class Running:
    """A cluster started by the test, as `make run-cluster` starts it."""

    def __init__(self, proc: subprocess.Popen, navi: LiveNavi, port: int, worker_ports: list[int], log: Path):
        self.proc, self.navi, self.port, self.worker_ports, self.log = proc, navi, port, worker_ports, log
        self.url = f"http://127.0.0.1:{port}"
        self.headers = {"Authorization": f"Bearer {navi.token}"}

    def worker_pid(self, number: int) -> int | None:
        """The pid of the live worker process on worker `number`'s port (a child of the cluster)."""
        needle = f"-p\0{self.worker_ports[number - 1]}\0"
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.proc.pid and "navi_project.serve" in cmdline and needle in cmdline + "\0":
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    return int(entry.name)
        return None

    def worker_url(self, number: int) -> str:
        return f"http://127.0.0.1:{self.worker_ports[number - 1]}"

    def ws(self, number: int, session_id: str):
        url = f"ws://127.0.0.1:{self.worker_ports[number - 1]}/ws/sessions/{session_id}"
        return websockets.connect(url, additional_headers=self.headers, max_size=None, max_queue=None, open_timeout=60)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def shell(self, code: str) -> str:
        result = subprocess.run([PYTHON, "manage.py", "shell", "-c", code], cwd=ROOT, env=self.navi.env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[-1]  # after the shell's own notice


@pytest.fixture
def cluster(llm_live, tmp_path):
    if not nginx_available():
        pytest.skip("nginx is not installed; `apt-get install nginx` (.ci/run does this)")
    if not redis_server.available():
        pytest.skip("redis-server is not installed; `apt-get install redis-server` (.ci/run does this)")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with cluster_database(tmp_path) as database_url:
        navi = LiveNavi(env={"OLLAMA_HOST": llm_live.url, "DATABASE_URL": database_url}, data_dir=tmp_path / "data")
        navi.prepare()
        port, worker_ports = free_port(), [free_port(), free_port()]
        log_path = run_dir / "cluster.log"
        env = {k: v for k, v in navi.env.items() if k not in ("REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "navi_project.cluster", "--workers", "2", "--port", str(port),
                 "--worker-ports", ",".join(map(str, worker_ports)), "--run-dir", str(run_dir)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        running = Running(proc, navi, port, worker_ports, log_path)
        try:
            wait_until_healthy(running.url, proc, log_path)
            yield running
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
            print(f"--- cluster log ---\n{running.log_text()[-8000:]}")


def wait_for(predicate, what: str, timeout: float = TIMEOUT, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


async def new_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/sessions", json={"new": True})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


async def test_a_worker_killed_mid_answer_is_restarted_and_its_answer_finished(cluster, live_llm) -> None:
    live_llm.add_rule(Rule(match="the crashing story", turns=[Turn(content=CRASHED, chunk_size=8, delay=0.5)]))
    live_llm.add_rule(Rule(match="the surviving story", turns=[Turn(content=SURVIVOR, chunk_size=6, delay=0.25)]))
    async with httpx.AsyncClient(base_url=cluster.url, headers=cluster.headers, timeout=60) as client:
        doomed, kept = await new_session(client), await new_session(client)
        victim = cluster.worker_pid(1)
        assert victim is not None
        # The doomed answer runs on worker 1 and is watched from worker 2 too; worker 2 answers the other.
        async with cluster.ws(1, doomed) as owner_ws, cluster.ws(2, doomed) as watcher, cluster.ws(2, kept) as survivor:
            await owner_ws.send(json.dumps({"type": "message", "content": "tell the crashing story"}))
            head = await recv_until(owner_ws, lambda f: f["type"] == "stream_delta" and f["seq"] >= 4, 60)
            run_id = head[0]["run_id"]
            await recv_until(watcher, lambda f: f["type"] == "stream_delta", 60)
            await survivor.send(json.dumps({"type": "message", "content": "tell the surviving story"}))
            await recv_until(survivor, lambda f: f["type"] == "stream_delta", 60)

            os.kill(victim, signal.SIGKILL)
            # The other worker serves on: its answer streams to the end, nginx sends requests to it.
            frames = await recv_run(survivor, 60)
            assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == SURVIVOR
            assert (await client.get("/health")).status_code == 200
            assert (await client.get(f"/sessions/{kept}")).status_code == 200

            # The watching socket is told the dead run is over (the page reloads the chat).
            killed_at = time.monotonic()
            told = await recv_until(watcher, lambda f: f["type"] == "resume_unavailable", TIMEOUT)
            assert told[-1] == {"type": "resume_unavailable", "run_id": run_id}
            assert time.monotonic() - killed_at <= 90

        # The chat: the answer kept as interrupted with the text written so far, a line saying why.
        messages = (await client.get(f"/sessions/{doomed}")).json()["messages"]
        shape = [(m["role"], m["status"]) for m in messages]
        assert shape == [("user", "complete"), ("assistant", "interrupted"), ("system", "interrupted")], shape
        written = messages[1]["content"]  # as last saved (at least every second) before the kill
        assert written and CRASHED.startswith(written) and written != CRASHED
        assert "Send the message again" in messages[2]["content"]
        # ... and the chat no longer marked running.
        assert cluster.shell(
            f"from sessions_app.models import Session; print(repr(Session.objects.get(pk='{doomed}').active_run_id))"
        ) == "''"

    # The dead worker was started again, on its port, by the cluster.
    wait_for(lambda: (cluster.worker_pid(1) or victim) != victim, "worker 1 started again")
    wait_for(lambda: _healthy(cluster.worker_url(1)), "worker 1 answering again")
    log = cluster.log_text()
    assert "worker 1 exited with code -9" in log and "starting it again" in log
    assert "stopping the cluster" not in log

    live_llm.add_rule(Rule(match="after the crash", turns=[Turn(content="still here")]))
    async with cluster.ws(1, doomed) as ws:
        await ws.send(json.dumps({"type": "message", "content": "after the crash"}))
        frames = await recv_run(ws, 60)
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "still here"

    os.killpg(cluster.proc.pid, signal.SIGINT)
    assert cluster.proc.wait(timeout=60) == 0


def test_a_worker_that_keeps_dying_is_given_up_on_and_the_other_serves(cluster) -> None:
    killed = set()

    def kill_worker_2() -> bool:
        pid = cluster.worker_pid(2)
        if pid is not None and pid not in killed:
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        return "GIVING UP on worker 2" in cluster.log_text()

    wait_for(kill_worker_2, "the cluster giving up on worker 2", timeout=180, poll=0.05)
    assert len(killed) == 5  # started 4 times again after the first death, then given up on
    log = cluster.log_text()
    assert "died 5 times in a row" in log and "worker 1 still serving" in log
    # The cluster still serves, through nginx, from worker 1, for good.
    for _ in range(5):
        assert httpx.get(f"{cluster.url}/health", timeout=30).status_code == 200
    assert cluster.proc.poll() is None
    assert cluster.worker_pid(2) is None
    os.killpg(cluster.proc.pid, signal.SIGINT)
    assert cluster.proc.wait(timeout=60) == 0


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False

