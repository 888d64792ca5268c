"""agent.runs.reaper: a run whose worker died (its claim's heartbeat lapsed) is finished by another
worker — the answer kept as `interrupted`, a line saying what to do, the claim cleared, the
chat's sockets told — while live runs (a fresh heartbeat, or this process's own) are left alone.
The kill -9 of a real worker is tests/test_cluster_crash.py; this is the rule itself."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from agent.runs import reaper
from navi_project.asgi import application
from sessions_app import history
from sessions_app.models import ApiToken, Message, Session

pytestmark = pytest.mark.django_db(transaction=True)


def chat_left_running(owner, heartbeat_age: timedelta, run_id: str) -> Session:
    """A chat whose run (`run_id`) last beat `heartbeat_age` ago, mid-answer."""
    session = Session.objects.create(owner=owner, profile_id="secretary", active_run_id=run_id,
                                     active_run_heartbeat=timezone.now() - heartbeat_age)
    Message.objects.create(session=session, seq=1, role="user", content="tell me a story", status="complete")
    Message.objects.create(session=session, seq=2, role="assistant", content="Once upon a ti", status="partial")
    return session


async def test_a_dead_workers_run_is_finished_and_its_sockets_told(owner) -> None:
    dead = await sync_to_async(chat_left_running)(owner, history.RUN_CLAIM_TTL + timedelta(seconds=5), "deadrun")
    live = await sync_to_async(chat_left_running)(owner, timedelta(seconds=3), "liverun")
    token = (await sync_to_async(ApiToken.issue)(owner))[1]
    watcher = WebsocketCommunicator(application, f"/ws/sessions/{dead.pk}", headers=[(b"authorization", f"Bearer {token}".encode())])
    connected, _ = await watcher.connect(timeout=10)
    assert connected

    assert await reaper.reap_once() == [(str(dead.pk), "deadrun")]

    assert await watcher.receive_json_from(timeout=10) == {"type": "resume_unavailable", "run_id": "deadrun"}
    await watcher.disconnect()
    rows = [(m.role, m.status, m.content) async for m in Message.objects.filter(session=dead).order_by("seq")]
    assert rows[:2] == [("user", "complete", "tell me a story"), ("assistant", "interrupted", "Once upon a ti")]
    assert rows[2][:2] == ("system", "interrupted") and "Send the message again" in rows[2][2]
    await dead.arefresh_from_db()
    assert dead.active_run_id == "" and dead.active_run_heartbeat is None
    # The live run elsewhere is untouched; a second pass (another worker) finds nothing to do.
    await live.arefresh_from_db()
    assert live.active_run_id == "liverun"
    assert await Message.objects.filter(session=live, status="partial").acount() == 1
    assert await reaper.reap_once() == []
    assert await Message.objects.filter(session=dead).acount() == 3


def test_this_processs_own_late_run_is_not_reaped(owner) -> None:
    late = chat_left_running(owner, history.RUN_CLAIM_TTL + timedelta(seconds=5), "mine")
    assert reaper.reap_dead_runs(alive=frozenset({"mine"})) == []
    late.refresh_from_db()
    assert late.active_run_id == "mine"
    assert Message.objects.filter(session=late, status="partial").count() == 1
