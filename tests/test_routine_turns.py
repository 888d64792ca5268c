"""A routine's turn is marked as the routine's (issue #38): its user row names the routine and
when it ran, and it cannot be edited as the owner's own message."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from agent.models import Profile
from routines_app import scheduler as sch
from routines_app.models import Routine, RoutineRun
from sessions_app.models import Message
from tests.llm_server import Rule, Turn
from tests.test_routines_api import bearer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_planning(profiles):
    Profile.objects.update(planning_enabled=False)


async def _ran(llm, owner) -> tuple[RoutineRun, dict, AsyncClient]:
    llm.add_rule(Rule(match="Remind me to stretch", turns=[Turn(content="Time to stretch!")]))
    client, headers = AsyncClient(), await sync_to_async(bearer)(owner)
    created = await client.post("/routines", {"name": "Stretch", "instruction": "Remind me to stretch.",
                                              "schedule": {"every_s": 3600}}, content_type="application/json", headers=headers)
    rid = created.json()["id"]
    await client.post(f"/routines/{rid}/run", headers=headers)
    await sch.get_scheduler().idle()
    return await RoutineRun.objects.aget(), headers, client


async def test_the_routines_turn_names_the_routine_and_when_it_ran(llm, owner):
    run, headers, client = await _ran(llm, owner)
    assert run.status == "ok"
    routine = await Routine.objects.aget()
    detail = (await client.get(f"/sessions/{run.session_id}", headers=headers)).json()
    user = [m for m in detail["messages"] if m["role"] == "user"][0]
    assert user["content"] == "Remind me to stretch."
    mark = user["meta"]["routine"]
    assert mark["id"] == routine.pk and mark["name"] == "Stretch"
    assert mark["ran_at"][:16] <= run.finished_at.isoformat()[:16]
    # The owner's own message in the same chat is not marked.
    llm.script(Turn(content="ok"))
    await client.post(f"/sessions/{run.session_id}/messages", {"content": "thanks"}, content_type="application/json",
                      headers=headers)
    mine = await Message.objects.filter(session_id=run.session_id, role="user", content="thanks").aget()
    assert "routine" not in mine.meta


async def test_the_routines_instruction_cannot_be_edited_as_the_owners_words(llm, owner):
    run, headers, client = await _ran(llm, owner)
    row = await Message.objects.filter(session_id=run.session_id, role="user").aget()
    response = await client.post(f"/sessions/{run.session_id}/messages/{row.pk}/edit", {"content": "rm -rf"},
                                 content_type="application/json", headers=headers)
    assert response.status_code == 400
    assert "routine 'Stretch'" in response.json()["error"] and "/routines/" in response.json()["error"]
    assert (await Message.objects.aget(pk=row.pk)).content == "Remind me to stretch."
