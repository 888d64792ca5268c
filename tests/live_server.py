"""Real Navi server processes for end-to-end tests, browser tests and benchmarks.

    with LiveNavi(env={"OLLAMA_HOST": llm.url}) as navi:
        navi.url, navi.ws_url(session_id), navi.token, navi.username, navi.password
        navi.kill(); navi.start()        # crash and restart on the same database

Each instance has its own temp dir (SQLite file, workspace, session files, user tools), a free
port, an owner account and an API token. When the suite runs on PostgreSQL (`DATABASE_URL`,
`make test-postgres`), each instance gets its own fresh database on that server instead. Several instances can share one database (pass
`data_dir=` of the first) and a Redis channel layer (`REDIS_URL` in env) — that is how the
multi-worker tests run two real server processes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
PASSWORD = "live-server-password"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _libpq_url(url: str) -> str:
    return "postgresql://" + url.split("://", 1)[1]


def live_database_url(data_dir: Path) -> str:
    """The database of the server(s) on `data_dir`: a SQLite file in it, or, when the suite runs
    on PostgreSQL, a database created for it on that server (remembered in `data_dir`, so servers
    sharing the dir share the database)."""
    suite_url = os.environ.get("DATABASE_URL", "")
    if not suite_url.startswith(("postgres://", "postgresql://", "pgsql://")):
        return f"sqlite:///{data_dir / 'navi.db'}"
    marker = data_dir / "database_url"
    if marker.exists():
        return marker.read_text()
    data_dir.mkdir(parents=True, exist_ok=True)
    import uuid

    import psycopg

    name = f"navi_live_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq_url(suite_url), autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    url = suite_url.rsplit("/", 1)[0] + "/" + name
    marker.write_text(url)
    return url


def drop_live_database(data_dir: Path) -> None:
    """Drop the PostgreSQL database `live_database_url` made for `data_dir`, if any."""
    marker = data_dir / "database_url"
    if not marker.exists():
        return
    import psycopg

    url = marker.read_text()
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(_libpq_url(os.environ["DATABASE_URL"]), autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    marker.unlink()


class LiveNavi:
    def __init__(self, env: dict[str, str] | None = None, data_dir: str | Path | None = None, username: str = "owner"):
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="navi-live-"))
        self.username = username
        self.password = PASSWORD
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.token = ""
        self.log_path = self.data_dir / f"server-{self.port}.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": (env or {}).get("DATABASE_URL") or live_database_url(self.data_dir),
            "NAVI_WORKSPACE": str(self.data_dir / "workspace"),
            "MCP_DATA_DIR": str(self.data_dir / "mcp_data"),  # not the checkout's mcp_data/
            "SESSION_FILES_DIR": str(self.data_dir / "session_files"),
            "KNOWLEDGE_DIR": str(self.data_dir / "knowledge_files"),  # not the checkout's knowledge_files/
            "TOOLS_DIR": str(self.data_dir / "user_tools"),
            "SECRET_KEY": "live-test-secret",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "NAVI_ADMIN_USER": username,
            "NAVI_ADMIN_PASSWORD": PASSWORD,
            "NAVI_PERSONA": "You are Navi (live test persona).",
            "OLLAMA_NUM_CTX": "8192",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            # No title call after the first answer: it would take a scripted turn from the test LLM.
            "CHAT_TITLES": "first_words",
            # No job worker beside the server unless the test asks (env NAVI_JOB_WORKERS=1, as
            # `make run` has): most live tests queue no job, and a worker's start is CPU time.
            "NAVI_JOB_WORKERS": "0",
            **(env or {}),
        }
        self.env.pop("NAVI_TESTING", None)

    # --- lifecycle -------------------------------------------------------------------------
    def _manage(self, *args: str) -> str:
        result = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def prepare(self) -> None:
        """Migrate, create the owner and an API token (idempotent for a shared data dir)."""
        for sub in ("workspace", "session_files", "user_tools"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        self._manage("migrate", "--noinput")
        self._manage("ensure_owner")
        self.token = self._manage("navi_token", self.username).strip()

    def add_user(self, username: str, password: str = PASSWORD) -> str:
        """A second, plain (non-staff) account on this server's database; returns its API token."""
        code = (
            "from django.contrib.auth import get_user_model; "
            f"get_user_model().objects.filter(username={username!r}).exists() or "
            f"get_user_model().objects.create_user({username!r}, password={password!r})"
        )
        self._manage("shell", "-c", code)
        return self._manage("navi_token", username).strip()

    def start(self, timeout: float = 30, poll: float = 0.1) -> "LiveNavi":
        if not self.token:
            self.prepare()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "navi_project.serve", "-b", "127.0.0.1", "-p", str(self.port), "navi_project.asgi:application"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"navi server exited early:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(poll)
        raise RuntimeError(f"navi server did not come up in {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, like a crash: nothing gets to clean up."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        """Rows of one query on this server's database (SQLite or PostgreSQL; `%s` placeholders);
        [] for a statement that returns none (an UPDATE)."""
        url = self.env["DATABASE_URL"]
        if url.startswith("sqlite:///"):
            import sqlite3

            with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
                return db.execute(query.replace("%s", "?"), params).fetchall()
        import psycopg

        with psycopg.connect(_libpq_url(url)) as db:
            cursor = db.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []

    def job_worker_pids(self) -> list[int]:
        """The `manage.py db_worker` children the server started (NAVI_JOB_WORKERS)."""
        if self.proc is None:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            fields = stat.rpartition(")")[2].split()
            if int(fields[1]) == self.proc.pid and b"db_worker" in cmdline and fields[0] != "Z":
                found.append(int(entry.name))
        return found

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> "LiveNavi":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._own_dir:
            import shutil

            drop_live_database(self.data_dir)
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # --- addresses and helpers -----------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws_url(self, session_id: str, query: str = "") -> str:
        return f"ws://127.0.0.1:{self.port}/ws/sessions/{session_id}" + (f"?{query}" if query else "")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=30)

    def create_session(self, profile_id: str = "secretary") -> str:
        with self.api() as client:
            response = client.post("/sessions", json={"profile_id": profile_id})
            response.raise_for_status()
            return response.json()["session_id"]
