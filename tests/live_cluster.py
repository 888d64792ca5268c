"""Helpers for tests and benchmarks that start `python -m navi_project.cluster` (nginx, Redis,
several workers): where its database lives, whether nginx is installed, when it is up."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import httpx


def nginx_available() -> bool:
    return bool(shutil.which("nginx") or Path("/usr/sbin/nginx").exists())


@contextmanager
def cluster_database(data_dir: Path):
    """A DATABASE_URL for the cluster: a new database on the PostgreSQL server of DATABASE_URL
    (dropped afterwards), else a SQLite file the workers share."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        yield f"sqlite:///{data_dir / 'navi.db'}"
        return
    import psycopg

    name = f"navi_cluster_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = url.partition("?")[0].rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_until_healthy(url: str, proc: subprocess.Popen, log: Path, verify: bool | ssl.SSLContext = True) -> None:
    """Until `url`/health answers 200 through the proxy; fails with the cluster's log."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the cluster exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if httpx.get(f"{url}/health", timeout=2, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("the cluster did not answer /health through nginx within 120 s")


