"""A run stopped because the server shuts down (SIGTERM, Ctrl-C, `make run-cluster` stopping) is
recorded `interrupted`, never `stopped` as if its owner had pressed Stop: a routine's run row, and
the line left in the chat."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from prometheus_client import REGISTRY

from agent.models import Profile
from agent.runs.manager import SHUT_DOWN_TEXT, get_run_manager
from routines_app import scheduler as sch
from routines_app.models import Routine, RoutineRun
from sessions_app.models import ApiToken, Message, Session
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.django_db(transaction=True)
@pytest.fixture(autouse=True)
def _no_planning(profiles):
    """The scripted turn answers at once (no planning call before it)."""
    Profile.objects.update(planning_enabled=False)


SLOW = "".join(f"<{k:03d}> " for k in range(400))  # 0.2 s a chunk: streaming when the server stops


async def until(predicate, timeout: float = 30.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not await sync_to_async(predicate)():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_a_routine_run_stopped_by_shutdown_is_interrupted(llm, owner, profiles) -> None:
    llm.add_rule(Rule(match="ramble", turns=[Turn(content=SLOW, chunk_size=6, delay=0.2)]))
    headers = {"Authorization": f"Bearer {(await sync_to_async(ApiToken.issue)(owner))[1]}"}
    client = AsyncClient()
    response = await client.post("/routines", {"name": "Rambler", "instruction": "ramble on", "schedule": {"cron": "0 8 * * *"}},
                                 content_type="application/json", headers=headers)
    assert response.status_code == 201, response.content
    rid = response.json()["id"]
    assert (await client.post(f"/routines/{rid}/run", headers=headers)).status_code == 202
    await until(lambda: Message.objects.filter(role="assistant", status="partial").exclude(content="").exists())

    await get_run_manager().shutdown()
    await sch.get_scheduler().idle()

    run = await RoutineRun.objects.aget(routine_id=rid)
    assert run.status == RoutineRun.Status.INTERRUPTED, run.status
    assert "shut down" in run.error and "Run now" in run.error
    routine = await Routine.objects.aget(pk=rid)
    rows = [(m.role, m.status) async for m in Message.objects.filter(session_id=routine.session_id).order_by("seq")]
    assert rows == [("user", "complete"), ("assistant", "interrupted"), ("system", "interrupted")], rows
    marker = await Message.objects.filter(session_id=routine.session_id, role="system").afirst()
    assert marker.content == SHUT_DOWN_TEXT and marker.meta["kind"] == "error"


async def test_a_chat_run_stopped_by_shutdown_says_so_not_stopped(llm, owner, profiles) -> None:
    llm.add_rule(Rule(match="ramble", turns=[Turn(content=SLOW, chunk_size=6, delay=0.2)]))
    session = await Session.objects.acreate(owner=owner, profile_id="secretary")
    stops_before = REGISTRY.get_sample_value("navi_runs_stopped_total") or 0
    manager = get_run_manager()
    run = await manager.start(str(session.pk), "ramble on")
    await until(lambda: Message.objects.filter(role="assistant", status="partial").exclude(content="").exists())

    await manager.shutdown()
    await run.done.wait()

    rows = [(m.role, m.status, m.content) async for m in Message.objects.filter(session=session).order_by("seq")]
    assert [r[:2] for r in rows] == [("user", "complete"), ("assistant", "interrupted"), ("system", "interrupted")]
    assert rows[1][2] and SLOW.startswith(rows[1][2])  # what was written is kept
    assert rows[2][2] == SHUT_DOWN_TEXT
    assert (REGISTRY.get_sample_value("navi_runs_stopped_total") or 0) == stops_before  # nobody pressed Stop
