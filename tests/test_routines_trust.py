"""Routines under attack (issue #35): numbers out of range (item 5), a burst of manual runs
(item 6), and routines made or changed from a chat that read untrusted content (item 1)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from routines_app.models import Routine
from tests.test_routines_api import offer_routine_tools

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _profiles_offer_routines(profiles):
    offer_routine_tools()


def _raw(client: Client, method: str, path: str, text: str):
    return getattr(client, method)(path, text, content_type="application/json")


BASE = '"name": "n", "instruction": "say hi"'


class TestNumbersOutOfRange:
    @pytest.mark.parametrize("schedule", [
        '{"every_s": 1e309}', '{"every_s": -1e309}', '{"every_s": NaN}', '{"every_s": Infinity}',
        '{"at": "9999-12-31T23:59:59-14:00"}', '{"at": "0001-01-01T00:00:00+14:00"}',
        '{"at": "9999-12-31T23:59:59+00:00"}', '{"at": "9999-12-31T23:59:59"}',
        '{"at": "0001-01-01T00:00:00+00:00"}', '{"at": "2200-01-01T00:00:00+00:00"}',
    ])
    @pytest.mark.parametrize("extra", ["", ', "jitter_s": 60', ', "time_zone": "Pacific/Kiritimati"',
                                       ', "time_zone": "America/New_York", "jitter_s": 3600'])
    def test_a_schedule_out_of_range_is_a_400_with_a_message_and_nothing_is_saved(self, owner_client, schedule, extra):
        response = _raw(owner_client, "post", "/routines", f'{{{BASE}, "schedule": {schedule}{extra}}}')
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error and ("100 years" in error or "finite number" in error or "in the past" in error), error
        assert not Routine.objects.exists()

    @pytest.mark.parametrize("field", ["jitter_s", "catch_up_s"])
    @pytest.mark.parametrize("number", ["1e309", "NaN", "-Infinity", "1e300"])
    def test_other_numbers_out_of_range_are_a_400(self, owner_client, field, number):
        response = _raw(owner_client, "post", "/routines", f'{{{BASE}, "schedule": {{"every_s": 3600}}, "{field}": {number}}}')
        assert response.status_code == 400 and response.json()["error"], response.content
        assert not Routine.objects.exists()

    @pytest.mark.parametrize("patch", [
        '{"schedule": {"every_s": 1e309}}', '{"schedule": {"at": "9999-12-31T23:59:59-14:00"}}',
        '{"schedule": {"at": "0001-01-01T00:00:00+14:00"}, "jitter_s": 60}', '{"jitter_s": 1e309}',
    ])
    def test_a_patch_out_of_range_is_a_400_and_changes_nothing(self, owner_client, patch):
        created = _raw(owner_client, "post", "/routines", f'{{{BASE}, "schedule": {{"every_s": 3600}}}}').json()
        response = _raw(owner_client, "patch", f"/routines/{created['id']}", patch)
        assert response.status_code == 400 and response.json()["error"], response.content
        routine = Routine.objects.get()
        assert routine.schedule == {"every_s": 3600} and routine.jitter_s == 0

    def test_a_near_edge_time_still_works(self, owner_client):
        response = _raw(owner_client, "post", "/routines", f'{{{BASE}, "schedule": {{"at": "2099-12-31T23:59:59-14:00"}}, '
                                                          '"jitter_s": 3600, "time_zone": "Pacific/Kiritimati"}')
        assert response.status_code == 201, response.content
        assert json.loads(response.content)["next_fires"]


class TestRunNowBurst:
    async def test_a_burst_of_manual_runs_is_mostly_refused_with_429_and_a_clear_message(self, llm, owner, other_user):
        import asyncio

        from asgiref.sync import sync_to_async
        from django.test import AsyncClient

        from routines_app import scheduler as sch
        from routines_app.models import RoutineRun
        from sessions_app.models import ApiToken

        client = AsyncClient()
        headers = {"Authorization": f"Bearer {(await sync_to_async(ApiToken.issue)(owner))[1]}"}
        created = await client.post("/routines", {"name": "n", "instruction": "say hi", "schedule": {"every_s": 3600}},
                                    content_type="application/json", headers=headers)
        rid = created.json()["id"]
        answers = await asyncio.gather(*[client.post(f"/routines/{rid}/run", headers=headers) for _ in range(30)])
        await sch.get_scheduler().idle()
        accepted = [a for a in answers if a.status_code == 202]
        refused = [a for a in answers if a.status_code == 429]
        assert len(accepted) == 6 and len(refused) == 24, [a.status_code for a in answers]
        assert "too many manual runs" in refused[0].json()["error"] and "try again in" in refused[0].json()["error"]
        assert int(refused[0]["Retry-After"]) >= 1
        assert await RoutineRun.objects.acount() == 6

        # another user's limit is their own
        other_headers = {"Authorization": f"Bearer {(await sync_to_async(ApiToken.issue)(other_user))[1]}"}
        theirs = await client.post("/routines", {"name": "n", "instruction": "say hi", "schedule": {"every_s": 3600}},
                                   content_type="application/json", headers=other_headers)
        answer = await client.post(f"/routines/{theirs.json()['id']}/run", headers=other_headers)
        assert answer.status_code == 202
        # and nobody runs someone else's routine however often they try
        assert (await client.post(f"/routines/{rid}/run", headers=other_headers)).status_code == 404
        await sch.get_scheduler().idle()
