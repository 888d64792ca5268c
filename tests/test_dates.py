"""Relative dates pinned when a todo item or a memory fact is kept (tools_app.dates): "next Friday"
on a list means another day once Friday has passed."""

from __future__ import annotations

import asyncio
from datetime import date, timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from agent.registry import get_agent
from memory_app.models import MemoryFact
from tools_app import dates
from tools_app.context import current_chat_session_id, current_event_sink, current_session_id, current_user_id
from tools_app.models import TodoList

FRIDAY = date(2026, 11, 27)


@pytest.mark.parametrize("text, pinned", [
    ("dentist next Friday", "dentist next Friday (2026-12-04)"),  # said on a Friday: a week on
    ("party this Friday", "party this Friday (2026-11-27)"),
    ("call mum tomorrow", "call mum tomorrow (2026-11-28)"),
    ("bins the day after tomorrow", "bins the day after tomorrow (2026-11-29)"),
    ("gym yesterday", "gym yesterday (2026-11-26)"),
    ("renew the passport in two weeks", "renew the passport in two weeks (2026-12-11)"),
    ("pay rent on Monday", "pay rent on Monday (2026-11-30)"),
    ("lunch Wednesday and dinner Sunday", "lunch Wednesday (2026-12-02) and dinner Sunday (2026-11-29)"),
])
def test_a_relative_date_gets_the_date_it_stands_for(text, pinned):
    assert dates.pin(text, FRIDAY) == pinned


@pytest.mark.parametrize("text", [
    "pay today's bill",  # a possessive, not a day to pin
    "I sat in the sun",  # "sat" and "sun" are words, not days
    "meeting on Monday, 3 December",  # a date is already given
    "Friday 4th",
    "dentist on 2026-12-04, next Friday",  # written out already: left as it is
    "buy milk",
    "",
])
def test_text_without_a_relative_date_is_left_as_it_is(text):
    assert dates.pin(text, FRIDAY) == text


def test_a_weekday_alone_is_a_day_to_come_on_a_list_and_a_habit_in_a_fact():
    assert dates.pin("call Bob Monday", FRIDAY) == "call Bob Monday (2026-11-30)"
    assert dates.pin("team meeting every Monday", FRIDAY) == "team meeting every Monday"
    assert dates.pin("bins out each second Tuesday", FRIDAY) == "bins out each second Tuesday"
    assert dates.pin("gym on Monday and Thursday", FRIDAY, weekdays=False) == "gym on Monday and Thursday"
    assert dates.pin("dentist next Friday", FRIDAY, weekdays=False) == "dentist next Friday (2026-12-04)"


def test_an_item_that_is_only_a_date_joins_the_item_before_it():
    assert dates.with_dates(["dentist", "next Friday"], FRIDAY) == ["dentist, next Friday (2026-12-04)"]
    assert dates.with_dates(["buy milk", "for tomorrow", "call Bob"], FRIDAY) == [
        "buy milk, tomorrow (2026-11-28)", "call Bob"]
    # Dates in a row after a task's date are the clock's days copied: dropped.
    assert dates.with_dates(["dentist", "next Friday", "next Monday", "next Tuesday", "buy milk"], FRIDAY) == [
        "dentist, next Friday (2026-12-04)", "buy milk"]
    # A first item has nothing to join; a task that mentions a day is a task of its own.
    assert dates.with_dates(["next Friday", "call Bob on Monday"], FRIDAY) == [
        "next Friday (2026-12-04)", "call Bob on Monday (2026-11-30)"]


@pytest.mark.django_db(transaction=True)
async def test_the_todo_list_keeps_the_date_of_next_friday(session):
    from tools_app.builtin.working_notes import TodoTool

    token = current_session_id.set(str(session.id))
    try:
        result = await TodoTool().execute({"action": "set", "tasks": ["dentist", "next Friday", "buy milk"]})
    finally:
        current_session_id.reset(token)
    assert result.success, result.error
    today = timezone.localdate()
    friday = today + timedelta(days=(4 - today.weekday()) % 7 or 7)
    todo = await TodoList.objects.aget(scope=str(session.id))
    assert [i["task"] for i in todo.items] == [f"dentist, next Friday ({friday.isoformat()})", "buy milk"]
    assert friday.isoformat() in result.output


@pytest.mark.django_db(transaction=True)
async def test_a_fact_saved_with_tomorrow_keeps_the_date(owner, session):
    current_user_id.set(owner.id)
    current_chat_session_id.set(str(session.pk))
    current_event_sink.set(asyncio.Queue())
    agent = await sync_to_async(get_agent)()
    result = await agent.tools.call(
        "memory_save", {"category": "personal", "key": "haircut", "value": "haircut tomorrow at 10"}, ["memory_save"])
    assert result.success, result.error
    tomorrow = (timezone.localdate() + timedelta(days=1)).isoformat()
    fact = await MemoryFact.objects.aget(owner=owner, key="haircut")
    assert fact.value == f"haircut tomorrow ({tomorrow}) at 10"
