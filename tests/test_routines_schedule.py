"""Routines' time arithmetic and the scheduler's claims, with an injected clock (no test sleeps
through real minutes): DST changes of Europe/Berlin and America/New_York, listing and editing
never skipping a due slot, catch-up inside the window and `missed` outside it, two schedulers
racing for the same slots, a crashed run marked `interrupted` and never run again, and a
restart right after a slot ran."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from zoneinfo import ZoneInfo

import pytest
from django.db import OperationalError, connections

from routines_app import scheduler as sch
from routines_app import services
from routines_app.models import Routine, RoutineRun
from routines_app.schedule import ScheduleError, jitter, parse, slot_at_or_before, slots_after

UTC = dt_timezone.utc
pytestmark = pytest.mark.django_db(transaction=True)


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


class Clock:
    def __init__(self, start: datetime):
        self.moment = start

    def __call__(self) -> datetime:
        return self.moment

    def at(self, moment: datetime) -> Clock:
        self.moment = moment
        return self


def make(owner, clock: Clock, **data) -> Routine:
    body = {"name": "r", "instruction": "do it", **data}
    return services.create(owner, body, now=clock())


def claimed_slots(scheduler: sch.Scheduler, now: datetime) -> list[datetime]:
    return [run.scheduled_for for _, run, _ in scheduler.claim_due(now)]


def fires_over(owner, cron: str, tz: str, start: datetime, days: int) -> list[datetime]:
    """Walk the clock minute-exactly through `days` days: the UTC instants the scheduler claims."""
    clock = Clock(start)
    make(owner, clock, schedule={"cron": cron}, time_zone=tz)
    scheduler = sch.Scheduler(now=clock)
    fired = []
    for _ in range(days):
        routine = Routine.objects.get(name="r")
        due = routine.next_fire_at
        assert claimed_slots(scheduler, due - timedelta(seconds=1)) == []  # not a second early
        fired += claimed_slots(scheduler, due)
    Routine.objects.all().delete()
    return fired


class TestDaylightSaving:
    @pytest.mark.parametrize(("cron", "expected"), [
        ("30 2 * * *", [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]),
        ("30 1 * * *", [utc(2026, 3, 28, 0, 30), utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 23, 30)]),
    ])
    def test_berlin_spring_forward(self, owner, cron, expected):
        # 02:30 does not exist on 29 March: it fires at 03:00 CEST, the first instant after the gap.
        assert fires_over(owner, cron, "Europe/Berlin", utc(2026, 3, 27, 12), 3) == expected

    @pytest.mark.parametrize(("cron", "expected"), [
        ("30 2 * * *", [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
        ("30 1 * * *", [utc(2026, 10, 23, 23, 30), utc(2026, 10, 24, 23, 30), utc(2026, 10, 26, 0, 30)]),
    ])
    def test_berlin_fall_back(self, owner, cron, expected):
        # 02:30 happens twice on 25 October: it fires once, the first time (CEST).
        assert fires_over(owner, cron, "Europe/Berlin", utc(2026, 10, 23, 12), 3) == expected

    @pytest.mark.parametrize(("cron", "expected"), [
        ("30 2 * * *", [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]),
        ("30 1 * * *", [utc(2026, 3, 7, 6, 30), utc(2026, 3, 8, 6, 30), utc(2026, 3, 9, 5, 30)]),
    ])
    def test_new_york_spring_forward(self, owner, cron, expected):
        assert fires_over(owner, cron, "America/New_York", utc(2026, 3, 6, 18), 3) == expected

    @pytest.mark.parametrize(("cron", "expected"), [
        ("30 2 * * *", [utc(2026, 10, 31, 6, 30), utc(2026, 11, 1, 7, 30), utc(2026, 11, 2, 7, 30)]),
        ("30 1 * * *", [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]),
    ])
    def test_new_york_fall_back(self, owner, cron, expected):
        # 01:30 happens twice on 1 November: once, at 01:30 EDT.
        assert fires_over(owner, cron, "America/New_York", utc(2026, 10, 30, 18), 3) == expected

    def test_the_zone_is_not_accepted_and_ignored(self, owner):
        clock = Clock(utc(2026, 6, 1, 12))
        berlin = make(owner, clock, schedule={"cron": "0 8 * * *"}, time_zone="Europe/Berlin")
        tokyo = make(owner, clock, name="t", schedule={"cron": "0 8 * * *"}, time_zone="Asia/Tokyo")
        assert berlin.next_slot == utc(2026, 6, 2, 6) and tokyo.next_slot == utc(2026, 6, 1, 23)
        assert services.as_dict(berlin)["next_fires"][0] == "2026-06-02T08:00:00+02:00"

    def test_a_one_shot_without_offset_is_read_in_the_routine_zone(self, owner):
        clock = Clock(utc(2026, 6, 1, 12))
        once = make(owner, clock, schedule={"at": "2026-06-01T18:00"}, time_zone="America/New_York")
        assert once.next_slot == utc(2026, 6, 1, 22)



def wall_fires_on(owner, cron: str, tz: str, day: str) -> list[str]:
    """Walk the scheduler from fire to fire across the local `day`: its claims as wall times with
    their offsets (the next day's first fire ends the walk)."""
    zone = ZoneInfo(tz)
    start = datetime.fromisoformat(day).replace(tzinfo=zone) - timedelta(hours=12)
    clock = Clock(start.astimezone(UTC))
    make(owner, clock, schedule={"cron": cron}, time_zone=tz)
    scheduler = sch.Scheduler(now=clock)
    fired = []
    while True:
        due = Routine.objects.get(name="r").next_fire_at
        assert claimed_slots(scheduler, due - timedelta(seconds=1)) == []  # not a second early
        slots = claimed_slots(scheduler, due)
        assert len(slots) == 1
        local = slots[0].astimezone(zone)
        if local.date().isoformat() > day:
            break
        if local.date().isoformat() == day:
            fired.append(local.strftime("%H:%M%z"))
    Routine.objects.all().delete()
    return fired


class TestDaylightSavingEveryField:
    """Each matching wall time fires once, whatever the minute and hour fields: the times a
    spring-forward skips fire once, at the first minute after the gap; the times a fall-back
    repeats fire once, the first time."""

    @pytest.mark.parametrize(("cron", "day", "expected"), [
        # 02:00 and 02:30 do not exist on 28 March 2027: one fire at 03:00 CEST.
        ("*/30 2 * * *", "2027-03-28", ["03:00+0200"]),
        ("*/30 2-3 * * *", "2027-03-28", ["03:00+0200", "03:30+0200"]),
        ("15,45 1-2 * * *", "2027-03-28", ["01:15+0100", "01:45+0100", "03:00+0200"]),
        # 02:00-02:59 happens twice on 25 October 2026: each wall time once, in CEST.
        ("*/30 2 * * *", "2026-10-25", ["02:00+0200", "02:30+0200"]),
        ("0,20,40 2-3 * * *", "2026-10-25",
         ["02:00+0200", "02:20+0200", "02:40+0200", "03:00+0100", "03:20+0100", "03:40+0100"]),
    ])
    def test_berlin(self, owner, cron, day, expected):
        assert wall_fires_on(owner, cron, "Europe/Berlin", day) == expected

    @pytest.mark.parametrize(("cron", "day", "expected"), [
        ("*/20 2 * * *", "2026-03-08", ["03:00-0400"]),
        ("*/20 1-2 * * *", "2026-03-08", ["01:00-0500", "01:20-0500", "01:40-0500", "03:00-0400"]),
        ("*/20 1 * * *", "2026-11-01", ["01:00-0400", "01:20-0400", "01:40-0400"]),
        ("10 1-2 * * *", "2026-11-01", ["01:10-0400", "02:10-0500"]),
    ])
    def test_new_york(self, owner, cron, day, expected):
        assert wall_fires_on(owner, cron, "America/New_York", day) == expected

    @pytest.mark.parametrize(("cron", "day", "expected"), [
        # Lord Howe moves by 30 minutes: 02:00-02:29 skipped on 4 October 2026 ...
        ("*/15 2 * * *", "2026-10-04", ["02:30+1100", "02:45+1100"]),
        ("10 2 * * *", "2026-10-04", ["02:30+1100"]),
        # ... and 01:30-01:59 repeated on 5 April 2026.
        ("*/15 1 * * *", "2026-04-05", ["01:00+1100", "01:15+1100", "01:30+1100", "01:45+1100"]),
        ("45 1 * * *", "2026-04-05", ["01:45+1100"]),
    ])
    def test_lord_howe_half_hour_shift(self, owner, cron, day, expected):
        assert wall_fires_on(owner, cron, "Australia/Lord_Howe", day) == expected

    @pytest.mark.parametrize(("tz", "spring", "fall"), [
        ("Europe/Berlin", "2027-03-28", "2026-10-25"),
        ("America/New_York", "2027-03-14", "2026-11-01"),
        ("Australia/Lord_Howe", "2026-10-04", "2026-04-05"),
    ])
    def test_every_quarter_hour_keeps_one_fire_per_wall_time(self, tz, spring, fall):
        # Pure slot arithmetic over whole days: no wall time twice, none lost except inside a gap.
        s = parse({"cron": "*/15 * * * *"}, tz, now=utc(2026, 1, 1))
        zone = ZoneInfo(tz)
        for day in (spring, fall):
            start = datetime.fromisoformat(day).replace(tzinfo=zone).astimezone(UTC) - timedelta(hours=1)
            walls = []
            for slot in slots_after(s, start):
                local = slot.astimezone(zone)
                if local.date().isoformat() > day:
                    break
                if local.date().isoformat() == day:
                    walls.append(local.strftime("%H:%M"))
            assert len(walls) == len(set(walls))
            assert walls == sorted(walls)
            assert len(walls) == (96 if day == fall else 96 - len(set(_skipped(zone, day))))

    @pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
    def test_far_future_transitions_follow_the_same_rules(self, tz):
        # Beyond the tz database's listed transitions (2037) zoneinfo extends the rules; so do slots.
        zone = ZoneInfo(tz)
        s = parse({"cron": "*/30 * * * *"}, tz, now=utc(2026, 1, 1))
        start, seen, folds = utc(2051, 1, 1), set(), 0
        for slot in slots_after(s, start):
            if slot.year > 2051:
                break
            local = slot.astimezone(zone)
            key = local.replace(tzinfo=None)
            assert key not in seen  # a repeated wall time fires once
            seen.add(key)
            folds += local.fold
            assert slot_at_or_before(s, slot) == slot
        assert folds == 0  # never the second pass of a repeated hour
        assert len(seen) > 365 * 46  # the skipped wall times cost at most one gap's worth

    def test_the_calendar_edge_ends_the_slots_without_an_error(self):
        s = parse({"cron": "0 0 * * *"}, "Pacific/Kiritimati", now=utc(2026, 1, 1))
        assert list(slots_after(s, datetime(9999, 12, 31, 12, tzinfo=UTC))) == []
        assert slot_at_or_before(s, datetime(1, 1, 1, 1, tzinfo=UTC)) is None


def _skipped(zone: ZoneInfo, day: str) -> list[str]:
    """The quarter-hour wall times that do not exist on `day` in `zone`."""
    base = datetime.fromisoformat(day)
    out = []
    for q in range(96):
        wall = base + timedelta(minutes=15 * q)
        if wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None) != wall:
            out.append(wall.strftime("%H:%M"))
    return out


class TestNothingSkipped:
    def test_listing_and_editing_never_move_a_due_slot(self, owner, owner_client):
        clock = Clock(utc(2026, 6, 1, 12, 0, 30))
        routine = make(owner, clock, schedule={"every_s": 3600})
        slot = routine.next_slot
        assert slot == utc(2026, 6, 1, 13, 0, 30)
        clock.at(slot + timedelta(seconds=5))  # due, and nobody has checked yet
        for _ in range(3):
            assert owner_client.get("/routines").status_code == 200
            assert owner_client.get(f"/routines/{routine.pk}").status_code == 200
        response = owner_client.patch(f"/routines/{routine.pk}", {"name": "renamed", "instruction": "still due"},
                                      content_type="application/json")
        assert response.status_code == 200
        routine.refresh_from_db()
        assert routine.next_slot == slot
        assert claimed_slots(sch.Scheduler(now=clock), clock()) == [slot]
        assert RoutineRun.objects.get().scheduled_for == slot

    def test_pausing_then_resuming_starts_from_the_resume(self, owner):
        clock = Clock(utc(2026, 6, 1, 12))
        routine = make(owner, clock, schedule={"cron": "0 * * * *"})
        services.update(routine, {"enabled": False}, now=clock())
        clock.at(utc(2026, 6, 1, 15, 30))
        assert claimed_slots(sch.Scheduler(now=clock), clock()) == []  # paused
        services.update(routine, {"enabled": True}, now=clock())
        assert routine.next_slot == utc(2026, 6, 1, 16)
        assert not RoutineRun.objects.exists()


class TestCatchUp:
    def test_a_slot_missed_inside_the_window_runs_once_late_and_says_so(self, owner):
        clock = Clock(utc(2026, 6, 1, 7))
        routine = make(owner, clock, schedule={"cron": "0 8 * * *"}, time_zone="UTC")
        scheduler = sch.Scheduler(now=clock)
        clock.at(utc(2026, 6, 1, 10, 15))  # the server was down from 07:30 to 10:15
        claimed = scheduler.claim_due(clock())
        assert [(r.scheduled_for, note[:30]) for _, r, note in claimed] == [
            (utc(2026, 6, 1, 8), "This routine was due at 2026-0")]
        run = RoutineRun.objects.get()
        assert "runs 2 h 15 min late" in run.error and abs(run.lateness_s - (2 * 3600 + 900)) < 5
        assert scheduler.claim_due(clock() + timedelta(minutes=5)) == []  # once
        routine.refresh_from_db()
        assert routine.next_slot == utc(2026, 6, 2, 8)

    def test_older_than_the_window_is_recorded_missed_and_not_run(self, owner):
        clock = Clock(utc(2026, 6, 1, 7))
        make(owner, clock, schedule={"cron": "0 8 * * *"}, time_zone="UTC", catch_up_s=3600)
        clock.at(utc(2026, 6, 1, 9, 30))
        assert sch.Scheduler(now=clock).claim_due(clock()) == []
        missed = RoutineRun.objects.get()
        assert (missed.status, missed.scheduled_for) == ("missed", utc(2026, 6, 1, 8))
        assert "missed 1 slot(s) at 2026-06-01 08:00 UTC" in missed.error and "catch-up window of 1 h" in missed.error

    def test_a_backlog_inside_the_window_runs_once_not_once_per_slot(self, owner):
        clock = Clock(utc(2026, 6, 1, 8, 0, 0))
        make(owner, clock, schedule={"every_s": 300})
        clock.at(utc(2026, 6, 1, 9, 2))  # down for an hour: 12 slots passed, all inside the window
        claimed = sch.Scheduler(now=clock).claim_due(clock())
        assert [r.scheduled_for for _, r, _ in claimed] == [utc(2026, 6, 1, 9, 0)]
        missed = RoutineRun.objects.get(status="missed")
        assert missed.scheduled_for == utc(2026, 6, 1, 8, 55)
        assert "missed 11 slot(s) from 2026-06-01 08:05 UTC to 2026-06-01 08:55 UTC" in missed.error
        assert "only the latest slot runs, late" in missed.error

    def test_an_old_every_minute_routine_leaves_a_bounded_record(self, owner):
        clock = Clock(utc(2026, 6, 1, 0, 0, 0))
        make(owner, clock, schedule={"every_s": 60})
        clock.at(utc(2026, 6, 4, 0, 0, 30))  # three days (4320 slots) later
        claimed = sch.Scheduler(now=clock).claim_due(clock())
        assert [r.scheduled_for for _, r, _ in claimed] == [utc(2026, 6, 4, 0, 0, 0)]  # the latest, once
        rows = list(RoutineRun.objects.order_by("scheduled_for"))
        assert [r.status for r in rows] == ["missed", "running"]
        assert "missed more than 1000 slot(s)" in rows[0].error

    def test_jitter_is_the_same_on_every_worker_and_within_bounds(self, owner):
        clock = Clock(utc(2026, 6, 1, 7))
        routine = make(owner, clock, schedule={"cron": "0 8 * * *"}, time_zone="UTC", jitter_s=300)
        offset = jitter(routine.pk, routine.next_slot, 300)
        assert routine.next_fire_at == routine.next_slot + offset and abs(offset.total_seconds()) <= 300
        assert sch.Scheduler(now=clock).claim_due(routine.next_fire_at - timedelta(seconds=1)) == []
        assert len(sch.Scheduler(now=clock).claim_due(routine.next_fire_at)) == 1


class TestExactlyOnce:
    def test_two_schedulers_racing_claim_each_slot_once(self, owner, django_user_model):
        # 250 due at once: more than one claim transaction (sch.CLAIM_CHUNK) per worker.
        clock = Clock(utc(2026, 6, 1, 7, 59))
        users = [owner] + [django_user_model.objects.create_user(f"u{i}") for i in range(9)]
        for i in range(250):
            make(users[i % 10], clock, name=f"r{i}", schedule={"cron": "0 8 * * *"}, time_zone="UTC")
        due = utc(2026, 6, 1, 8, 0, 1)
        results: dict[str, list] = {}
        gate = threading.Barrier(2)

        def worker(name: str) -> None:
            scheduler = sch.Scheduler(now=lambda: due, worker_id=name)
            gate.wait()
            got = []
            try:
                for _ in range(200):  # passes, as the loop would, until nothing is due
                    try:
                        got += [run.routine_id for _, run, _ in scheduler.claim_due(due)]
                        if not Routine.objects.filter(next_fire_at__lte=due).exists():
                            break
                    except OperationalError:  # SQLite's in-memory test database: a table lock, try again
                        continue
            finally:
                connections.close_all()
            results[name] = got

        threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)  # a loaded machine
        a, b = results["a"], results["b"]
        assert len(a) + len(b) == 250 and not set(a) & set(b)
        assert RoutineRun.objects.count() == 250 and not Routine.objects.filter(next_fire_at__lte=due).exists()
        assert RoutineRun.objects.filter(scheduled_for=utc(2026, 6, 1, 8)).count() == 250

    def test_a_routine_that_cannot_be_planned_does_not_hold_up_the_others(self, owner):
        clock = Clock(utc(2026, 6, 1, 7, 59))
        for i in range(5):
            make(owner, clock, name=f"r{i}", schedule={"cron": "0 8 * * *"}, time_zone="UTC")
        Routine.objects.filter(name="r2").update(time_zone="Mars/Olympus")  # stored before zones were checked
        claimed = sch.Scheduler(now=clock).claim_due(utc(2026, 6, 1, 8, 0, 1))
        assert sorted(routine.name for routine, _, _ in claimed) == ["r0", "r1", "r3", "r4"]
        assert all(run.pk and run.status == "running" for _, run, _ in claimed)

    def test_a_run_cut_off_by_a_crash_is_interrupted_and_not_run_again(self, owner, settings):
        settings.REDIS_URL = ""  # one process: at its start every live run is dead
        clock = Clock(utc(2026, 6, 1, 7, 59))
        make(owner, clock, schedule={"cron": "0 8 * * *"}, time_zone="UTC")
        clock.at(utc(2026, 6, 1, 8, 0, 5))
        first_life = sch.Scheduler(now=clock, worker_id="dead")
        assert len(first_life.claim_due(clock())) == 1  # claimed ... and the process was killed
        Routine.objects.update(next_slot=utc(2026, 6, 1, 8), next_fire_at=utc(2026, 6, 1, 8))  # killed before advancing
        clock.at(utc(2026, 6, 1, 8, 1))
        assert sch.recover_at_start(clock()) == 1
        second_life = sch.Scheduler(now=clock, worker_id="new")
        assert second_life.claim_due(clock()) == []
        run = RoutineRun.objects.get()
        assert run.status == "interrupted" and "not run again" in run.error
        assert Routine.objects.get().next_slot == utc(2026, 6, 2, 8)

    def test_in_a_cluster_only_a_stale_heartbeat_means_dead(self, owner, settings):
        settings.REDIS_URL = "redis://cluster"
        settings.ROUTINE_STALE_S = 60
        clock = Clock(utc(2026, 6, 1, 7, 59))
        make(owner, clock, schedule={"cron": "0 8 * * *"}, time_zone="UTC")
        clock.at(utc(2026, 6, 1, 8, 0, 0))
        assert len(sch.Scheduler(now=clock, worker_id="alive").claim_due(clock())) == 1
        other = sch.Scheduler(now=clock, worker_id="other")
        other.claim_due(clock() + timedelta(seconds=30))  # heartbeat 30 s old: still alive
        assert RoutineRun.objects.get().status == "running"
        other.claim_due(clock() + timedelta(seconds=61))
        assert RoutineRun.objects.get().status == "interrupted"

    def test_a_restart_right_after_a_slot_ran_does_not_run_it_again(self, owner):
        clock = Clock(utc(2026, 6, 1, 7, 59))
        routine = make(owner, clock, schedule={"cron": "0 8 * * *"}, time_zone="UTC")
        clock.at(utc(2026, 6, 1, 8, 0, 1))
        assert len(sch.Scheduler(now=clock).claim_due(clock())) == 1
        RoutineRun.objects.update(status="ok")
        # Even if the process died between the claim and moving the routine on:
        Routine.objects.filter(pk=routine.pk).update(next_slot=utc(2026, 6, 1, 8), next_fire_at=utc(2026, 6, 1, 8))
        sch.recover_at_start(clock())
        assert sch.Scheduler(now=clock).claim_due(clock() + timedelta(seconds=2)) == []
        assert RoutineRun.objects.count() == 1 and RoutineRun.objects.get().status == "ok"


class TestScheduleInput:
    @pytest.mark.parametrize(("raw", "words"), [
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
        ({"cron": "* * *"}, "needs 5 fields"),
        ({"every_s": 30}, "the shortest interval is 60 seconds"),
        ({"at": "2020-01-01T08:00:00+00:00"}, "is in the past"),
        ({"at": "tomorrow"}, "is not an ISO 8601 date-time"),
        ({"every": 60}, "schedule must be exactly one of"),
    ])
    def test_bad_schedules_name_the_problem(self, raw, words):
        with pytest.raises(ScheduleError, match=words.replace("*", r"\*").replace("(", r"\(")):
            parse(raw, "UTC", now=utc(2026, 1, 1))

    def test_an_unknown_zone_is_refused(self):
        with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus'"):
            parse({"cron": "0 8 * * *"}, "Mars/Olympus", now=utc(2026, 1, 1))
