"""Benchmark: routine fire lateness and the scheduler's idle cost, on real server processes.

    .venv/bin/python bench/routines.py [--workers 1|2] [--routines 10000] [--users 100] [--due 200] [--idle-s 60]

Prints figures, asserts nothing. One database (SQLite, or PostgreSQL when DATABASE_URL is
postgres://) with `users` accounts and `routines` routines: `due` one-shots due at the same
instant ~40 s after the server(s) start, the rest daily cron routines at other times. The
LLM is the protocol-level test server (tests/llm_server.py; instant echo answers), so the
figures are the scheduler's, not a model's. With --workers 2 both processes share Redis and
the database, as `make run-cluster`.

  lateness p50/p99/max   the slot claimed (the fire) - its fire time, and the agent run started
                         (its chat ready, the turn begun) - its fire time, over the `due` runs
  claims per worker      how the due slots were shared
  idle CPU               CPU seconds the server process(es) used per minute with nothing due
"""

from __future__ import annotations

import argparse
import os
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1, choices=[1, 2])
    parser.add_argument("--routines", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--due", type=int, default=200)
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="navi-bench-routines-"))
    llm = LLMServer().start()
    redis = redis_server.RedisServer().start() if args.workers == 2 else None
    env = {"OLLAMA_HOST": llm.url, "LOG_LEVEL": "WARNING", "CHAT_TITLES": "first_words"}
    if redis:
        env["REDIS_URL"] = redis.url
    servers = [LiveNavi(env=env, data_dir=data_dir)]
    servers[0].prepare()
    if args.workers == 2:
        second = LiveNavi(env={**env, "DATABASE_URL": servers[0].env["DATABASE_URL"]}, data_dir=data_dir)
        second.token = servers[0].token
        servers.append(second)
    try:
        from datetime import datetime, timedelta, timezone

        due_at = (datetime.now(timezone.utc) + timedelta(seconds=60)).replace(microsecond=0)
        seeded = servers[0]._manage("shell", "-c", SEED.format(users=args.users, routines=args.routines, due=args.due,
                                                               due_at=due_at.isoformat()))
        print(f"seeded {seeded.strip()} routines for {args.users} users; {args.due} due at {due_at:%H:%M:%S} UTC")
        for server in servers:
            server.start(timeout=60)
        pids = [s.proc.pid for s in servers]
        # Idle: nothing is due until due_at; measure CPU over a window before it.
        settle = 5.0
        time.sleep(settle)
        window = min(args.idle_s, max(5.0, (due_at - datetime.now(timezone.utc)).total_seconds() - 5))
        before = [cpu_seconds(p) for p in pids]
        time.sleep(window)
        idle = [(cpu_seconds(p) - b) * 60.0 / window for p, b in zip(pids, before)]
        print(f"idle CPU: {', '.join(f'{x:.2f}' for x in idle)} CPU-seconds per minute per process "
              f"(measured over {window:.0f} s, {args.routines} routines, nothing due)")
        deadline = time.monotonic() + 300
        query = ("SELECT COUNT(*) FROM routines_app_routinerun WHERE status NOT IN ('running', 'waiting_approval')")
        while time.monotonic() < deadline and servers[0].sql(query)[0][0] < args.due:
            time.sleep(0.5)
        rows = servers[0].sql("SELECT started_at, scheduled_for, worker_id, status, lateness_s FROM routines_app_routinerun")
        print(f"runs: {len(rows)} ({', '.join(sorted({r[3] for r in rows}))})")
        claimed = sorted(r[4] for r in rows if r[4] is not None)
        started = sorted((_ts(r[0]) - _ts(r[1])).total_seconds() for r in rows if r[0] is not None)
        for label, values in (("fired (slot claimed)", claimed), ("agent run started", started)):
            if values:
                p99 = values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]
                print(f"lateness, {label}: p50 {statistics.median(values):.3f} s, p99 {p99:.3f} s, max {values[-1]:.3f} s")
        claims: dict[str, int] = {}
        for r in rows:
            claims[r[2]] = claims.get(r[2], 0) + 1
        print(f"claims per worker: {sorted(claims.values(), reverse=True)}")
    finally:
        for server in servers:
            server.stop()
        llm.stop()
        if redis:
            redis.stop()


if __name__ == "__main__":
    main()
