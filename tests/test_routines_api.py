"""Routines through REST and the agent: the DESIGN §9 shapes, bad input (400, nothing saved),
another user's ids (404), run now landing in the routine's chat, the per-user time zone, the
trust rules of unattended runs (approval waits, is answered over REST, times out to deny; a
routine's own run must ask before scheduling), and "remind me in 2 minutes to stretch" from a
scripted model, end to end with a time-travelled clock."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient, Client
from django.utils import timezone

from agent.models import Profile, ToolCallRecord
from routines_app import scheduler as sch
from routines_app.models import Routine, RoutineRun
from sessions_app.models import ApiToken, Message, Session
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.django_db(transaction=True)
ROUTINE_TOOLS = ["schedule_routine", "list_routines", "cancel_routine"]
KEYS = {"id", "name", "instruction", "schedule", "time_zone", "profile_id", "enabled", "next_fires", "last_run"}
RUN_KEYS = {"id", "scheduled_for", "status", "session_id", "started_at", "finished_at", "error", "deliveries"}


def offer_routine_tools() -> None:
    """Every profile offers the routine tools and does not plan (the tests script each call)."""
    for profile in Profile.objects.all():
        profile.enabled_tools = list(profile.enabled_tools) + ROUTINE_TOOLS
        profile.planning_enabled = False
        profile.save()


@pytest.fixture(autouse=True)
def _profiles_offer_routines(profiles, settings):
    offer_routine_tools()
    settings.TERMINAL_ALLOWED_COMMANDS = "echo"


def body(**extra) -> dict:
    return {"name": "Morning", "instruction": "Say good morning.", "schedule": {"cron": "0 8 * * 1-5"}, **extra}


def post(client: Client, path: str, data) -> tuple[int, dict]:
    response = client.post(path, json.dumps(data), content_type="application/json")
    return response.status_code, response.json()


async def until(predicate, timeout: float = 15.0):
    """Wait for a condition the run reaches on its own (polled, bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await sync_to_async(predicate)()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


class TestRest:
    def test_the_contract(self, owner_client, owner):
        status, created = post(owner_client, "/routines", body(time_zone="Europe/Berlin", jitter_s=60, catch_up_s=600))
        assert status == 201 and KEYS <= set(created)
        assert created["schedule"] == {"cron": "0 8 * * 1-5"} and created["time_zone"] == "Europe/Berlin"
        assert created["enabled"] is True and created["last_run"] is None and len(created["next_fires"]) == 3
        for fire in created["next_fires"]:  # ISO 8601 with the zone's offset, a weekday near 08:00
            moment = datetime.fromisoformat(fire)
            assert moment.utcoffset() in (timedelta(hours=1), timedelta(hours=2)) and moment.weekday() < 5
            assert abs((moment - moment.replace(hour=8, minute=0, second=0)).total_seconds()) <= 60
        rid = created["id"]
        listed = owner_client.get("/routines").json()["routines"]
        assert [r["id"] for r in listed] == [rid]
        assert owner_client.get(f"/routines/{rid}").json()["name"] == "Morning"
        patched = owner_client.patch(f"/routines/{rid}", json.dumps({"enabled": False, "schedule": {"every_s": 3600}}),
                                     content_type="application/json").json()
        assert patched["enabled"] is False and patched["schedule"] == {"every_s": 3600} and patched["next_fires"] == []
        assert owner_client.get(f"/routines/{rid}/runs").json() == []
        assert owner_client.delete(f"/routines/{rid}").json() == {"ok": True, "id": rid}
        assert owner_client.get(f"/routines/{rid}").status_code == 404

    @pytest.mark.parametrize(("data", "words"), [
        (body(schedule={"cron": "0 25 * * *"}), "invalid cron expression '0 25 * * *'"),
        (body(schedule={"at": "2001-01-01T08:00:00+00:00"}), "is in the past"),
        (body(time_zone="Europe/Atlantis"), "unknown time zone 'Europe/Atlantis'"),
        (body(schedule={"every_s": 59}), "the shortest interval is 60 seconds"),
        (body(instruction="x" * 100_001), "instruction is 100001 characters; the limit is 100000"),
        (body(name=""), "name is required"),
        (body(profile_id="nope"), "unknown profile 'nope'"),
        (body(colour="red"), "unknown field(s) colour"),
        (body(jitter_s=7200), "jitter_s is 7200; at most 3600"),
    ])
    def test_bad_input_is_a_400_naming_the_problem_and_nothing_is_saved(self, owner_client, data, words):
        status, answer = post(owner_client, "/routines", data)
        assert status == 400 and words in answer["error"]
        assert not Routine.objects.exists()

    def test_a_bad_patch_changes_nothing(self, owner_client):
        _, created = post(owner_client, "/routines", body())
        response = owner_client.patch(f"/routines/{created['id']}", json.dumps({"name": "new", "schedule": {"cron": "nope"}}),
                                      content_type="application/json")
        assert response.status_code == 400 and "invalid cron expression 'nope'" in response.json()["error"]
        assert Routine.objects.get().name == "Morning"

    def test_more_than_the_limit_is_refused(self, owner_client, settings):
        settings.ROUTINES_MAX_PER_USER = 2
        assert [post(owner_client, "/routines", body(name=f"r{i}"))[0] for i in range(3)] == [201, 201, 400]
        assert "the limit is 2" in post(owner_client, "/routines", body())[1]["error"]
        assert Routine.objects.count() == 2

    def test_another_users_routine_is_not_found(self, owner_client, other_user):
        _, created = post(owner_client, "/routines", body())
        mallory = Client()
        mallory.force_login(other_user)
        rid = created["id"]
        assert mallory.get(f"/routines/{rid}").status_code == 404
        assert mallory.patch(f"/routines/{rid}", "{}", content_type="application/json").status_code == 404
        assert mallory.delete(f"/routines/{rid}").status_code == 404
        assert mallory.get(f"/routines/{rid}/runs").status_code == 404
        assert mallory.post(f"/routines/{rid}/run").status_code == 404
        assert mallory.get("/routines").json() == {"routines": []}
        assert Routine.objects.filter(pk=rid).exists()

    def test_authentication_and_csrf(self, anon_client, owner):
        assert anon_client.get("/routines").status_code == 401
        assert anon_client.post("/routines/1/run").status_code == 401
        browser = Client(enforce_csrf_checks=True)
        browser.force_login(owner)
        assert browser.post("/routines", json.dumps(body()), content_type="application/json").status_code == 403
        token = ApiToken.issue(owner)[1]
        scripted = Client(headers={"Authorization": f"Bearer {token}"})
        assert scripted.post("/routines", json.dumps(body()), content_type="application/json").status_code == 201

    def test_the_owners_time_zone_is_a_setting_and_the_routines_default(self, owner_client, settings):
        assert owner_client.get("/settings").json()["time_zone"] == settings.TIME_ZONE
        bad = owner_client.patch("/settings", json.dumps({"time_zone": "Moon/Base"}), content_type="application/json")
        assert bad.status_code == 400 and "unknown time zone 'Moon/Base'" in bad.json()["error"]
        ok = owner_client.patch("/settings", json.dumps({"time_zone": "Asia/Tokyo"}), content_type="application/json")
        assert ok.json()["time_zone"] == "Asia/Tokyo"
        assert post(owner_client, "/routines", body())[1]["time_zone"] == "Asia/Tokyo"
        assert datetime.fromisoformat(post(owner_client, "/routines", body(name="b"))[1]["next_fires"][0]).utcoffset() == timedelta(hours=9)


def bearer(owner) -> dict:
    return {"Authorization": f"Bearer {ApiToken.issue(owner)[1]}"}


async def create(client: AsyncClient, headers: dict, **extra) -> int:
    response = await client.post("/routines", body(**extra), content_type="application/json", headers=headers)
    assert response.status_code == 201, response.content
    return response.json()["id"]


async def run_now(owner, **extra) -> tuple[AsyncClient, dict, int]:
    """A routine of `owner` made over REST and run now: (client, headers, routine id)."""
    client, headers = AsyncClient(), await sync_to_async(bearer)(owner)
    rid = await create(client, headers, **extra)
    await client.post(f"/routines/{rid}/run", headers=headers)
    return client, headers, rid


DISK_CHECK = {"name": "terminal", "arguments": {"command": "echo disk-ok"}}


def script_call(llm, instruction: str, call: dict, answer: str) -> None:
    """The model makes `call` for a run of `instruction`, then answers."""
    llm.add_rule(Rule(match=instruction, turns=[Turn(tool_calls=[call]), Turn(content=answer)]))


async def decide(client: AsyncClient, headers: dict, run: RoutineRun, record: ToolCallRecord, decision: str):
    """Answer the approval the run waits for, over REST."""
    return await client.post(f"/sessions/{run.session_id}/approvals/{record.approval_id}", {"decision": decision},
                             content_type="application/json", headers=headers)


class TestRuns:
    async def test_run_now_writes_in_the_routines_chat_and_marks_it_unread(self, llm, owner):
        client, headers = AsyncClient(), await sync_to_async(bearer)(owner)
        rid = await create(client, headers, instruction="Say hello to the owner.")
        response = await client.post(f"/routines/{rid}/run", headers=headers)
        assert response.status_code == 202 and set(response.json()) == {"run_id"}
        await sch.get_scheduler().idle()
        runs = (await client.get(f"/routines/{rid}/runs", headers=headers)).json()
        assert len(runs) == 1 and RUN_KEYS <= set(runs[0]) and runs[0]["id"] == response.json()["run_id"]
        assert runs[0]["status"] == "ok" and runs[0]["finished_at"] and runs[0]["deliveries"]
        sid = runs[0]["session_id"]
        listed = (await client.get("/sessions", headers=headers)).json()["sessions"]
        mine = next(s for s in listed if s["id"] == sid)
        assert mine["unread"] is True and mine["origin"] == "routine" and mine["title"] == "Morning"
        opened = (await client.get(f"/sessions/{sid}", headers=headers)).json()
        assert [m["content"] for m in opened["messages"]] == ["Say hello to the owner.", "echo: Say hello to the owner."]
        assert opened["unread"] is False
        # A second run writes in the same chat.
        await client.post(f"/routines/{rid}/run", headers=headers)
        await sch.get_scheduler().idle()
        assert await Session.objects.filter(origin="routine").acount() == 1
        assert await Message.objects.filter(session_id=sid).acount() == 4
        last = (await client.get(f"/routines/{rid}", headers=headers)).json()["last_run"]
        assert last["status"] == "ok"

    async def test_a_tool_that_asks_waits_and_is_answered_over_rest(self, llm, owner):
        await Profile.objects.filter(pk="secretary").aupdate(tool_policy={"terminal": "ask"})
        script_call(llm, "check the disk", DISK_CHECK, "Disk is fine.")
        client, headers, _ = await run_now(owner, instruction="check the disk")
        run = await until(lambda: RoutineRun.objects.filter(status="waiting_approval").first())
        record = await ToolCallRecord.objects.aget(decision="pending")
        assert (await decide(client, headers, run, record, "approve")).status_code == 200
        await sch.get_scheduler().idle()
        run = await RoutineRun.objects.aget(pk=run.pk)
        assert run.status == "ok"
        tool_rows = [m async for m in Message.objects.filter(session_id=run.session_id, role="tool")]
        assert "disk-ok" in tool_rows[0].content
        assert len(run.deliveries) == 2  # the owner was told the approval waits, then the result

    async def test_an_unanswered_approval_times_out_to_deny(self, llm, owner, settings):
        settings.ROUTINE_APPROVAL_TIMEOUT_S = 0.5
        await Profile.objects.filter(pk="secretary").aupdate(tool_policy={"terminal": "ask"})
        script_call(llm, "check the disk", DISK_CHECK, "Could not check.")
        await run_now(owner, instruction="check the disk")
        await sch.get_scheduler().idle()
        assert (await ToolCallRecord.objects.aget(tool="terminal")).decision == "timed_out"
        run = await RoutineRun.objects.aget()
        assert run.status == "ok"
        tool_rows = [m async for m in Message.objects.filter(session_id=run.session_id, role="tool")]
        assert "nobody approved this terminal call in time" in tool_rows[0].content

    async def test_a_routines_own_run_must_ask_before_scheduling(self, llm, owner):
        script_call(llm, "multiply", {"name": "schedule_routine", "arguments": {
            "name": "copy", "instruction": "multiply", "every_s": 60}}, "ok")
        client, headers, _ = await run_now(owner, instruction="multiply")
        run = await until(lambda: RoutineRun.objects.filter(status="waiting_approval").first())
        record = await ToolCallRecord.objects.aget(decision="pending")
        assert "routine's own unattended run" in record.reason
        await decide(client, headers, run, record, "deny")
        await sch.get_scheduler().idle()
        assert await Routine.objects.acount() == 1  # no copy was made


class TestTheAgentSchedules:
    async def test_remind_me_in_two_minutes_end_to_end(self, llm, owner, session):
        at = (timezone.now() + timedelta(minutes=2)).replace(microsecond=0)
        llm.add_rule(Rule(match="remind me in 2 minutes to stretch", turns=[
            Turn(tool_calls=[{"name": "schedule_routine", "arguments": {
                "name": "Stretch", "instruction": "Remind the user to stretch.", "cron": "61 25 * * *"}}]),
            Turn(tool_calls=[{"name": "schedule_routine", "arguments": {
                "name": "Stretch", "instruction": "Remind the user to stretch.", "at": at.isoformat()}}]),
            Turn(content="I will remind you at the time shown."),
        ]))
        llm.add_rule(Rule(match="Remind the user to stretch", turns=[Turn(content="Time to stretch!")]))
        client, headers = AsyncClient(), await sync_to_async(bearer)(owner)
        answer = await client.post(f"/sessions/{session.pk}/messages", {"content": "remind me in 2 minutes to stretch"},
                                   content_type="application/json", headers=headers)
        assert answer.status_code == 200, answer.content
        tools = [m.content async for m in Message.objects.filter(session=session, role="tool").order_by("seq")]
        assert "not scheduled: invalid cron expression '61 25 * * *'" in tools[0]
        assert "Scheduled routine" in tools[1] and "Next runs:" in tools[1]
        routine = await Routine.objects.aget()
        assert routine.next_slot == at
        scheduler = sch.Scheduler(now=lambda: at - timedelta(seconds=1))
        assert await scheduler.check() == []  # not yet
        scheduler.now = lambda: at + timedelta(seconds=1)
        assert len(await scheduler.check()) == 1
        await scheduler.idle()
        run = await RoutineRun.objects.aget()
        assert run.status == "ok" and run.scheduled_for == at
        said = [m.content async for m in Message.objects.filter(session_id=run.session_id).order_by("seq")]
        assert said == ["Remind the user to stretch.", "Time to stretch!"]
        assert await scheduler.check() == []  # once


class TestDelivery:
    async def test_each_targets_outcome_is_recorded_and_a_failure_is_visible(self, llm, owner, settings):
        from notify_app.models import NotifyTarget
        from tests.notify_services import Receiver

        with Receiver() as good, Receiver(status=500) as bad:
            settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{good.port}", f"127.0.0.1:{bad.port}"]
            ok_target = await NotifyTarget.objects.acreate(owner=owner, kind="apprise", url=f"json://127.0.0.1:{good.port}/a")
            bad_target = await NotifyTarget.objects.acreate(owner=owner, kind="apprise", url=f"json://127.0.0.1:{bad.port}/b")
            client, headers, rid = await run_now(owner, instruction="Weather in Berlin?")
            await sch.get_scheduler().idle()
            runs = (await client.get(f"/routines/{rid}/runs", headers=headers)).json()
        outcome = {d["target_id"]: d for d in runs[0]["deliveries"]}
        assert outcome[ok_target.pk]["ok"] is True and outcome[bad_target.pk]["ok"] is False
        assert outcome[bad_target.pk]["error"]
        sent = good.received[0]["json"]
        assert sent["title"] == "Morning" and "echo: Weather in Berlin?" in sent["message"]

    async def test_without_targets_the_run_says_so(self, llm, owner):
        client, headers, rid = await run_now(owner)
        await sch.get_scheduler().idle()
        runs = (await client.get(f"/routines/{rid}/runs", headers=headers)).json()
        assert [d["ok"] for d in runs[0]["deliveries"]] == [False]
        assert "no notification targets" in runs[0]["deliveries"][0]["error"]


@pytest.fixture
def targets(owner, settings):
    """The owner's phone (Web Push) and an Apprise endpoint, both local receivers."""
    from notify_app.models import NotifyTarget
    from notify_app.vapid import public_key
    from tests.notify_services import PushService, Receiver

    with PushService() as push, Receiver() as hook:
        settings.NOTIFY_ALLOW_HTTP_PUSH = True
        settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{push.port}", f"127.0.0.1:{hook.port}"]
        phone = push.subscribe(public_key())
        NotifyTarget.objects.create(owner=owner, kind="webpush", subscription=phone.subscription())
        NotifyTarget.objects.create(owner=owner, kind="apprise", url=f"json://127.0.0.1:{hook.port}/n")
        yield push, hook


def titles(push, hook) -> tuple[list[str], list[str]]:
    return [m["payload"]["title"] for m in push.received], [m["json"]["title"] for m in hook.received]


class TestOneNotificationPerRun:
    async def test_each_target_hears_of_a_run_once(self, llm, owner, targets):
        from agent.frames import notices

        push, hook = targets
        await run_now(owner, instruction="Weather in Berlin?")
        await sch.get_scheduler().idle()
        await notices.drain()  # nothing else is still on its way
        assert titles(push, hook) == (["Morning"], ["Morning"])
        assert "echo: Weather in Berlin?" in hook.received[0]["json"]["message"]

    async def test_an_approval_and_the_result_once_each(self, llm, owner, targets):
        from agent.frames import notices

        push, hook = targets
        await Profile.objects.filter(pk="secretary").aupdate(tool_policy={"terminal": "ask"})
        script_call(llm, "check the disk", DISK_CHECK, "Disk is fine.")
        client, headers, _ = await run_now(owner, instruction="check the disk")
        run = await until(lambda: RoutineRun.objects.filter(status="waiting_approval").first())
        await asyncio.to_thread(push.wait_for, 1)
        record = await ToolCallRecord.objects.aget(decision="pending")
        await decide(client, headers, run, record, "approve")
        await sch.get_scheduler().idle()
        await notices.drain()
        assert titles(push, hook) == (["Approval needed: Morning", "Morning"], ["Approval needed: Morning", "Morning"])


SLOW_ANSWER = "One. Two. Three. Four. Five. Six. Seven. Eight. Nine. Ten."


class TestDeleteWhileRunning:
    async def _streaming(self, llm, owner) -> tuple[AsyncClient, dict, int, RoutineRun]:
        """A routine whose run is answering, slowly (about six seconds of text)."""
        llm.add_rule(Rule(match="count slowly", turns=[Turn(content=SLOW_ANSWER, chunk_size=3, delay=0.3)]))
        client, headers = AsyncClient(), await sync_to_async(bearer)(owner)
        rid = await create(client, headers, instruction="count slowly")
        await client.post(f"/routines/{rid}/run", headers=headers)
        run = await until(lambda: RoutineRun.objects.exclude(run_id="").first())
        manager_run = sch.get_scheduler().live[run.pk]
        await until(lambda: any(f["type"] == "stream_delta" for f in manager_run.frames))
        return client, headers, rid, run

    async def test_stop_1_stops_the_run_and_the_chat_says_so(self, llm, owner, targets):
        from agent.frames import notices

        push, hook = targets
        client, headers, rid, run = await self._streaming(llm, owner)
        response = await client.delete(f"/routines/{rid}?stop=1", headers=headers)
        assert response.status_code == 200
        assert response.json() == {"ok": True, "id": rid, "runs_stopped": 1}
        await sch.get_scheduler().idle()
        await notices.drain()
        assert not await Routine.objects.filter(pk=rid).aexists()
        said = [m async for m in Message.objects.filter(session_id=run.session_id, role="assistant").order_by("seq")]
        assert said and all(m.content != SLOW_ANSWER for m in said)  # cut off, not finished
        session = await Session.objects.aget(pk=run.session_id)  # the chat stays, free for the owner
        assert session.active_run_id == ""
        assert titles(push, hook) == ([], [])  # the owner stopped it: nothing to report

    async def test_without_stop_the_answer_finishes_in_the_kept_chat(self, llm, owner, targets):
        from agent.frames import notices

        push, hook = targets
        client, headers, rid, run = await self._streaming(llm, owner)
        response = await client.delete(f"/routines/{rid}", headers=headers)
        assert response.status_code == 200
        body = response.json()
        assert body["runs_left_running"] == 1 and "runs_stopped" not in body
        assert f"/#{run.session_id}" in body["note"] and "?stop=1" in body["note"]
        await sch.get_scheduler().idle()
        await notices.drain()
        said = [m.content async for m in Message.objects.filter(session_id=run.session_id, role="assistant")]
        assert said == [SLOW_ANSWER]
        assert titles(push, hook) == (["Morning"], ["Morning"])  # the result still reaches the owner, once

    async def test_a_bad_stop_value_is_refused_and_nothing_is_deleted(self, owner):
        client, headers = AsyncClient(), await sync_to_async(bearer)(owner)
        rid = await create(client, headers)
        response = await client.delete(f"/routines/{rid}?stop=maybe", headers=headers)
        assert response.status_code == 400 and "?stop=1" in response.json()["error"]
        assert await Routine.objects.filter(pk=rid).aexists()

    async def test_another_users_delete_stops_nothing(self, llm, owner, other_user):
        client, headers, rid, run = await self._streaming(llm, owner)
        other = await sync_to_async(bearer)(other_user)
        response = await client.delete(f"/routines/{rid}?stop=1", headers=other)
        assert response.status_code == 404
        await sch.get_scheduler().idle()
        assert (await RoutineRun.objects.aget(pk=run.pk)).status == "ok"
        said = [m.content async for m in Message.objects.filter(session_id=run.session_id, role="assistant")]
        assert said == [SLOW_ANSWER]
