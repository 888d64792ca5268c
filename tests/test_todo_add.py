"""`todo` action=add: an item put on the list the owner already has, its done items kept (set
replaces the whole list: "add 'post the parcel'" must not wipe what was ticked off)."""

from __future__ import annotations

import pytest

from tools_app.builtin.working_notes import MAX_ITEMS, TodoTool
from tools_app.context import current_session_id, current_taint
from tools_app.models import TodoList

pytestmark = pytest.mark.django_db(transaction=True)


async def _todo(session, params: dict, taint: str = ""):
    token, marked = current_session_id.set(str(session.id)), current_taint.set(taint)
    try:
        return await TodoTool().execute(params)
    finally:
        current_taint.reset(marked)
        current_session_id.reset(token)


async def test_add_puts_tasks_at_the_end_and_keeps_what_was_done(session):
    await _todo(session, {"action": "set", "tasks": ["renew insurance", "book MOT"]})
    await _todo(session, {"action": "update", "index": 1, "status": "done"})
    result = await _todo(session, {"action": "add", "tasks": ["post the parcel"]})
    assert result.success and "3. [ ] post the parcel (pending)" in result.output and "Progress: 1/3" in result.output
    todo = await TodoList.objects.aget(scope=str(session.id))
    assert [(i["task"], i["status"]) for i in todo.items] == [
        ("renew insurance", "done"), ("book MOT", "pending"), ("post the parcel", "pending")]


async def test_add_on_no_list_starts_one_and_bad_input_is_refused_with_what_to_do(session):
    assert (await _todo(session, {"action": "add", "tasks": ["buy cat food"]})).output.startswith("1. [ ] buy cat food")
    empty = await _todo(session, {"action": "add", "tasks": ["  ", ""]})
    assert not empty.success and "non-empty `tasks`" in empty.error
    too_many = await _todo(session, {"action": "add", "tasks": [f"t{i}" for i in range(MAX_ITEMS)]})
    assert not too_many.success and "action=set" in too_many.error
    todo = await TodoList.objects.aget(scope=str(session.id))
    assert [i["task"] for i in todo.items] == ["buy cat food"]  # a refused add changes nothing


async def test_a_list_marked_by_outside_content_stays_marked_when_added_to(session):
    await _todo(session, {"action": "set", "tasks": ["from a page"]}, taint="http://evil.example/")
    await _todo(session, {"action": "add", "tasks": ["mine"]})  # the chat holds nothing outside now
    todo = await TodoList.objects.aget(scope=str(session.id))
    assert todo.untrusted_source == "http://evil.example/" and len(todo.items) == 2
    # a clean list added to while the chat holds outside content becomes marked
    await _todo(session, {"action": "set", "tasks": ["clean"]})
    await _todo(session, {"action": "add", "tasks": ["from a page"]}, taint="http://evil.example/")
    assert (await TodoList.objects.aget(scope=str(session.id))).untrusted_source == "http://evil.example/"
