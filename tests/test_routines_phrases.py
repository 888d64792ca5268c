"""Plain-language schedules (issue #38): the phrases a user types become the REST schedule forms,
the preview shows the next three runs in the owner's zone, and `schedule_routine` takes the
same words."""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient, Client

from routines_app.models import Routine
from routines_app.phrases import PhraseError, parse_phrase
from sessions_app.models import Message
from tests.llm_server import Rule, Turn
from tests.test_routines_api import ROUTINE_TOOLS, bearer

# Thursday 26 Nov 2026, 20:45 UTC = 21:45 in Berlin.
NOW = datetime(2026, 11, 26, 20, 45, tzinfo=dt_timezone.utc)
BERLIN = "Europe/Berlin"


@pytest.mark.parametrize(
    ("text", "schedule"),
    [
        ("every day at 7:30", {"cron": "30 7 * * *"}),
        ("every weekday at 8", {"cron": "0 8 * * 1-5"}),
        ("every Monday and Thursday at 18:00", {"cron": "0 18 * * 1,4"}),
        ("every 2 hours", {"every_s": 7200}),
        ("on the 1st of each month at 9", {"cron": "0 9 1 * *"}),
        ("tomorrow at 9", {"at": "2026-11-27T09:00:00+01:00"}),
        ("in 20 minutes", {"at": "2026-11-26T22:05:00+01:00"}),
        ("Every Day At 7:30pm.", {"cron": "30 19 * * *"}),
        ("every mon, wed and fri at 7", {"cron": "0 7 * * 1,3,5"}),
        ("every weekend at 10am", {"cron": "0 10 * * 0,6"}),
        ("daily at noon", {"cron": "0 12 * * *"}),
        ("every hour", {"every_s": 3600}),
        ("at 9", {"at": "2026-11-27T09:00:00+01:00"}),  # nine has passed today: tomorrow's
        ("monday at 9", {"at": "2026-11-30T09:00:00+01:00"}),
        ("0 8 * * 1-5", {"cron": "0 8 * * 1-5"}),  # cron still works
    ],
)
def test_phrases_become_the_existing_schedule_forms(text, schedule):
    assert parse_phrase(text, BERLIN, NOW) == schedule


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("whenever you like", "cannot read"),
        ("every day at 25", "not a time of day"),
        ("every blursday at 9", "not weekdays"),
        ("", "say when"),
        ("every day at 7 " * 40, "under 200"),
        (None, "say when"),
    ],
)
def test_words_that_are_not_a_schedule_say_what_works(text, says):
    with pytest.raises(PhraseError) as caught:
        parse_phrase(text, BERLIN, NOW)
    assert says in str(caught.value)
    assert "every weekday at 8" in str(caught.value) or says != "cannot read"


@pytest.mark.django_db
class TestPreview:
    def test_it_shows_the_next_three_runs_in_the_zone_given(self, owner_client):
        response = owner_client.get("/routines/preview", {"text": "every weekday at 8", "time_zone": BERLIN})
        assert response.status_code == 200
        body = response.json()
        assert body["schedule"] == {"cron": "0 8 * * 1-5"} and body["time_zone"] == BERLIN
        assert len(body["next_runs"]) == 3
        for run in body["next_runs"]:
            when = datetime.fromisoformat(run)
            assert (when.hour, when.minute) == (8, 0) and when.isoweekday() <= 5
            assert when.utcoffset().total_seconds() in (3600, 7200)  # Berlin's offset, not UTC

    def test_without_a_zone_it_uses_the_owners(self, owner_client, owner):
        owner_client.patch("/settings", {"time_zone": "America/New_York"}, content_type="application/json")
        body = owner_client.get("/routines/preview", {"text": "every day at 7:30"}).json()
        assert body["time_zone"] == "America/New_York"
        assert datetime.fromisoformat(body["next_runs"][0]).utcoffset().total_seconds() == -5 * 3600

    @pytest.mark.parametrize("query", [{"text": "soonish"}, {"text": "every day at 8", "time_zone": "Mars/Olympus"},
                                       {"text": "x" * 5000}, {}])
    def test_bad_input_is_a_400_that_says_what_to_send(self, owner_client, query):
        response = owner_client.get("/routines/preview", query)
        assert response.status_code == 400
        assert response.json()["error"]
        assert not Routine.objects.exists()

    def test_it_needs_a_login(self):
        assert Client().get("/routines/preview", {"text": "in 20 minutes"}).status_code in (302, 401)


@pytest.mark.django_db(transaction=True)
class TestTheToolTakesTheSameWords:
    @pytest.fixture(autouse=True)
    def _profiles_offer_routines(self, profiles):
        for profile in profiles:
            profile.enabled_tools = list(profile.enabled_tools) + ROUTINE_TOOLS
            profile.planning_enabled = False
            profile.save()

    async def test_every_weekday_at_8_from_a_chat(self, llm, owner, session):
        llm.add_rule(Rule(match="every weekday at 8 tell me the news", turns=[
            Turn(tool_calls=[{"name": "schedule_routine", "arguments": {
                "name": "News", "instruction": "Tell the news.", "when": "every weekday at 8", "time_zone": BERLIN}}]),
            Turn(tool_calls=[{"name": "schedule_routine", "arguments": {
                "name": "News2", "instruction": "Tell the news.", "cron": "every Monday and Thursday at 18:00"}}]),
            Turn(content="Done."),
        ]))
        client, headers = AsyncClient(), await sync_to_async(bearer)(owner)
        answer = await client.post(f"/sessions/{session.pk}/messages", {"content": "every weekday at 8 tell me the news"},
                                   content_type="application/json", headers=headers)
        assert answer.status_code == 200, answer.content
        routines = {r.name: r async for r in Routine.objects.all()}
        assert routines["News"].schedule == {"cron": "0 8 * * 1-5"} and routines["News"].time_zone == BERLIN
        assert routines["News2"].schedule == {"cron": "0 18 * * 1,4"}  # words in `cron`, as small models do

    async def test_words_it_cannot_read_come_back_to_the_model(self, llm, owner, session):
        llm.add_rule(Rule(match="sometime", turns=[
            Turn(tool_calls=[{"name": "schedule_routine", "arguments": {
                "name": "X", "instruction": "x", "when": "when the moon is full"}}]),
            Turn(content="Could not."),
        ]))
        client, headers = AsyncClient(), await sync_to_async(bearer)(owner)
        await client.post(f"/sessions/{session.pk}/messages", {"content": "sometime"},
                          content_type="application/json", headers=headers)
        tool = await Message.objects.filter(session=session, role="tool").afirst()
        assert "not scheduled: cannot read" in tool.content and "every weekday at 8" in tool.content
        assert not await Routine.objects.aexists()


def test_the_preview_reads_a_cron_line_back_in_words():
    from routines_app.phrases import describe

    assert describe({"cron": "0 18 * * 1,4"}) == "every Mon and Thu at 18:00 (cron 0 18 * * 1,4)"
    assert describe({"cron": "0 9 1 * *"}) == "on day 1 of each month at 09:00 (cron 0 9 1 * *)"
    assert describe({"cron": "*/5 * * * *"}) == "cron */5 * * * *"
    assert describe({"every_s": 7200}) == "every 2 hours"
