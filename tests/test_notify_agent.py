"""The agent notifies the owner's devices when nobody looks: an answer finished or an approval
waits while no socket (tab) has that chat open. A chat on screen gets no push."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from agent.frames import notices
from agent.models import Profile, ToolCallRecord
from agent.runs.manager import get_run_manager
from agent.trust import approvals
from notify_app.models import NotifyTarget
from notify_app.vapid import public_key
from tests.llm_server import Rule, Turn
from tests.notify_services import PushService
from tests.test_approvals import frames_until, open_socket, run_ended

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_planning(profiles, settings):
    Profile.objects.update(planning_enabled=False)
    settings.TERMINAL_ALLOWED_COMMANDS = "echo"


@pytest.fixture
def push(settings):
    with PushService() as service:
        settings.NOTIFY_ALLOW_HTTP_PUSH = True
        settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{service.port}"]
        yield service


@pytest.fixture
def phone(push, owner):
    """The owner's phone, subscribed to push."""
    browser = push.subscribe(public_key())
    NotifyTarget.objects.create(owner=owner, kind="webpush", subscription=browser.subscription())
    return browser


async def _run(session, text: str):
    run = await get_run_manager().start(str(session.id), text)
    await run.done.wait()
    await notices.drain()
    return run


async def test_an_answer_nobody_watches_is_pushed(llm, session, phone, push):
    llm.script("The report is ready: all 3 servers are up.")
    await _run(session, "check the servers")
    [got] = push.received
    assert got["payload"] == {
        "title": "Navi answered",
        "body": "The report is ready: all 3 servers are up.",
        "url": f"/#{session.id}",
        "tag": f"navi-chat-{session.id}",
    }


async def test_a_chat_open_in_a_tab_gets_no_push(llm, session, phone, push, owner_token):
    llm.script("Here you are.")
    comm = await open_socket(session, owner_token)
    await comm.send_json_to({"type": "message", "content": "hello"})
    end = (await frames_until(comm, run_ended))[-1]
    await get_run_manager().by_id[end["run_id"]].done.wait()  # the run's end starts the check…
    await notices.drain()  # …which is over here
    assert push.received == []
    await comm.disconnect()


async def test_an_approval_nobody_watches_is_pushed_then_the_answer(llm, session, phone, push, owner):
    llm.add_rule(
        Rule(
            match="disk",
            turns=[
                Turn(tool_calls=[{"name": "terminal", "arguments": {"command": "echo ok"}}]),
                Turn(content="Disk is fine."),
            ],
        )
    )
    run = await get_run_manager().start(str(session.id), "check the disk")
    [approval] = await asyncio.to_thread(push.wait_for, 1)
    assert approval["payload"]["title"] == "Navi needs your approval"
    assert approval["payload"]["body"].startswith("'terminal' waits for your approval")
    assert approval["payload"]["url"] == f"/#{session.id}" and approval["headers"]["Urgency"] == "high"
    record = await ToolCallRecord.objects.filter(
        session_id=session.id, decision=ToolCallRecord.Decision.PENDING
    ).afirst()
    await approvals.answer(str(session.id), record.approval_id, "approve", user_id=owner.id)
    await run.done.wait()
    await notices.drain()
    assert [r["payload"]["title"] for r in push.received] == ["Navi needs your approval", "Navi answered"]


async def test_a_stopped_run_and_a_run_left_to_its_caller_send_nothing(llm, session, phone, push):
    llm.script("An answer the routine reports itself.")
    notices.leave_to_caller(str(session.id))
    await _run(session, "routine step")
    assert push.received == []
    llm.script("Next time it is pushed again.")
    await _run(session, "again")
    assert len(push.received) == 1


async def test_an_owner_without_targets_costs_no_ping(llm, session, owner):
    llm.script("Fine.", "Fine again.")
    assert not await sync_to_async(NotifyTarget.objects.filter(owner=owner).exists)()
    sent = []
    layer = get_run_manager().layer
    original = layer.group_send

    async def spy(group, message):
        sent.append(message["type"])
        return await original(group, message)

    layer.group_send = spy
    try:
        await _run(session, "hi")
        assert "presence.ping" not in sent and "run.event" in sent
        await NotifyTarget.objects.acreate(owner=owner, kind="carrier-pigeon")  # now there is a target
        await _run(session, "hi again")
        assert "presence.ping" in sent
    finally:
        layer.group_send = original
