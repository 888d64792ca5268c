"""Benchmark: routine fire lateness and the scheduler's idle cost, on real server processes.

    .venv/bin/python bench/routines.py [--workers 1|2|both] [--routines 10000] [--users 100] [--due 200] [--idle-s 60]

Prints figures, asserts nothing. One database (SQLite, or PostgreSQL when DATABASE_URL is
postgres://) with `users` accounts and `routines` routines: `due` one-shots due at the same
instant ~60 s after the server(s) start, the rest daily cron routines at other times. The
LLM is the protocol-level test server (tests/llm_server.py; instant echo answers), so the
figures are the scheduler's and the run start's, not a model's. With --workers 2 both
processes share Redis and the database, as `make run-cluster`; `both` (the default) measures
one worker, then two, on fresh databases, and prints them side by side.

  fired                  the slot claimed (its row inserted) - its fire time
  run started            the run's turn begun (the instruction saved in its chat, read from the
                         message row, so the figure means the same whatever the scheduler does)
                         - its fire time
  first model request    the first request with the routine's instruction at the test LLM
                         server - its fire time (a real model's own queue comes on top)
  claims per worker      how the due slots were shared
  idle CPU               CPU seconds the server process(es) used per minute with nothing due
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import redis_server  # noqa: E402
from tests.live_server import LiveNavi  # noqa: E402
from tests.llm_server import LLMServer  # noqa: E402

SEED = """
import random
from datetime import datetime, timedelta, timezone
from django.contrib.auth import get_user_model
from routines_app.models import Routine
from routines_app import schedule as sched
User = get_user_model()
users = User.objects.bulk_create([User(username=f"bench{{i}}") for i in range({users})])
now = datetime.now(timezone.utc)
due = datetime.fromisoformat("{due_at}")
rows = []
rng = random.Random(7)
for i in range({routines}):
    owner = users[i % len(users)]
    if i < {due}:
        schedule, slot = {{"at": due.isoformat()}}, due
    else:  # daily, at an hour at least two away from now (never due during the benchmark)
        hour = (now.hour + 2 + rng.randrange(20)) % 24
        expr = f"{{rng.randrange(60)}} {{hour}} * * *"
        schedule = {{"cron": expr}}
        slot = next(sched.slots_after(sched.Schedule("cron", cron=expr, tz="UTC"), now))
    rows.append(Routine(owner=owner, name=f"r{{i}}", instruction=f"bench routine {{i}}", schedule=schedule,
                        time_zone="UTC", next_slot=slot, next_fire_at=slot, profile_id="secretary"))
Routine.objects.bulk_create(rows, batch_size=1000)
print(Routine.objects.count())
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process and its waited-for children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _ts(value):
    """A timestamp column as a datetime (SQLite hands back text)."""
    from datetime import datetime

    return value.replace(tzinfo=None) if isinstance(value, datetime) else datetime.fromisoformat(str(value)).replace(tzinfo=None)


class TimedLLM(LLMServer):
    """The test LLM server, noting when each request came in."""

    def _record(self, rec: dict) -> None:
        rec["_at"] = time.time()
        super()._record(rec)


def _quantiles(values: list[float]) -> tuple[float, float, float] | None:
    if not values:
        return None
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]
    return statistics.median(values), p99, values[-1]


def _instruction(request: dict) -> str:
    users = [m.get("content") for m in request.get("messages") or [] if m.get("role") == "user"]
    text = users[-1] if users else ""
    return text if isinstance(text, str) else ""


def measure(workers: int, args) -> dict:
    """One run of the benchmark with `workers` server processes; its figures."""
    from datetime import datetime, timedelta, timezone

    data_dir = Path(tempfile.mkdtemp(prefix="navi-bench-routines-"))
    llm = TimedLLM().start()
    redis = redis_server.RedisServer().start() if workers == 2 else None
    env = {"OLLAMA_HOST": llm.url, "LOG_LEVEL": "WARNING", "CHAT_TITLES": "first_words"}
    if redis:
        env["REDIS_URL"] = redis.url
    servers = [LiveNavi(env=env, data_dir=data_dir)]
    servers[0].prepare()
    if workers == 2:
        second = LiveNavi(env={**env, "DATABASE_URL": servers[0].env["DATABASE_URL"]}, data_dir=data_dir)
        second.token = servers[0].token
        servers.append(second)
    try:
        due_at = (datetime.now(timezone.utc) + timedelta(seconds=60)).replace(microsecond=0)
        seeded = servers[0]._manage("shell", "-c", SEED.format(users=args.users, routines=args.routines, due=args.due,
                                                               due_at=due_at.isoformat()))
        print(f"[{workers} worker(s)] seeded {seeded.strip().splitlines()[-1]} routines for {args.users} users; "
              f"{args.due} due at {due_at:%H:%M:%S} UTC")
        for server in servers:
            server.start(timeout=60)
        pids = [s.proc.pid for s in servers]
        # Idle: nothing is due until due_at; measure CPU over a window before it.
        time.sleep(5.0)
        window = min(args.idle_s, max(5.0, (due_at - datetime.now(timezone.utc)).total_seconds() - 5))
        before = [cpu_seconds(p) for p in pids]
        time.sleep(window)
        idle = [(cpu_seconds(p) - b) * 60.0 / window for p, b in zip(pids, before)]
        deadline = time.monotonic() + 300
        query = "SELECT COUNT(*) FROM routines_app_routinerun WHERE status NOT IN ('running', 'waiting_approval')"
        while time.monotonic() < deadline and servers[0].sql(query)[0][0] < args.due:
            time.sleep(0.5)
        rows = servers[0].sql("SELECT scheduled_for, worker_id, status, lateness_s, error FROM routines_app_routinerun")
        for problem in sorted({(r[2], (r[4] or "")[:300]) for r in rows if r[2] != "ok"}):
            print(f"[{workers} worker(s)] a run {problem[0]}: {problem[1]}")
        begun = servers[0].sql(
            "SELECT rr.scheduled_for, MIN(m.created_at) FROM routines_app_routinerun rr "
            "JOIN sessions_app_message m ON m.session_id = rr.session_id AND m.role = 'user' GROUP BY rr.id, rr.scheduled_for")
        first: dict[str, float] = {}
        for request in llm.requests:
            found = re.search(r"bench routine \d+", _instruction(request))
            if found and found.group() not in first:
                first[found.group()] = request["_at"]
        claims: dict[str, int] = {}
        for r in rows:
            claims[r[1]] = claims.get(r[1], 0) + 1
        return {
            "workers": workers,
            "runs": len(rows),
            "statuses": sorted({r[2] for r in rows}),
            "fired": _quantiles([r[3] for r in rows if r[3] is not None]),
            "started": _quantiles([(_ts(b) - _ts(s)).total_seconds() for s, b in begun if b is not None]),
            "model": _quantiles([t - due_at.timestamp() for t in first.values()]),
            "claims": sorted(claims.values(), reverse=True),
            "idle": idle,
        }
    finally:
        for server in servers:
            server.stop()
        llm.stop()
        if redis:
            redis.stop()


def _cell(q: tuple[float, float, float] | None) -> str:
    return " / ".join(f"{x:.2f}" for x in q) + " s" if q else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="both", choices=["1", "2", "both"])
    parser.add_argument("--routines", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--due", type=int, default=200)
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()
    results = [measure(n, args) for n in ((1, 2) if args.workers == "both" else (int(args.workers),))]
    print()
    print(f"{args.due} one-shots due at once, {args.routines} routines, {args.users} users; p50 / p99 / max after the fire time")
    print()
    print("| workers | fired | run started | first model request | claims | runs | idle CPU per minute |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['workers']} | {_cell(r['fired'])} | {_cell(r['started'])} | {_cell(r['model'])} | "
              f"{' + '.join(map(str, r['claims']))} | {r['runs']} ({', '.join(r['statuses'])}) | "
              f"{' + '.join(f'{x:.2f}' for x in r['idle'])} CPU-s |")


if __name__ == "__main__":
    main()
