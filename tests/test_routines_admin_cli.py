"""The routines' admin pages and `manage.py navi_routines list|next|run ID`."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from routines_app import services
from routines_app.models import Routine, RoutineRun

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_admin_lists_and_validates_routines(owner, owner_client):
    routine = services.create(owner, {"name": "Morning", "instruction": "hi", "schedule": {"cron": "0 8 * * *"}})
    assert owner_client.get("/admin/routines_app/routine/").status_code == 200
    assert owner_client.get(f"/admin/routines_app/routine/{routine.pk}/change/").status_code == 200
    assert owner_client.get("/admin/routines_app/routinerun/").status_code == 200
    form = {"owner": owner.pk, "name": "Morning", "instruction": "hi", "schedule": '{"cron": "0 99 * * *"}',
            "anchor_0": "2026-01-01", "anchor_1": "00:00:00", "time_zone": "UTC", "enabled": "on",
            "catch_up_s": 60, "jitter_s": 0, "runs-TOTAL_FORMS": 0, "runs-INITIAL_FORMS": 0}
    response = owner_client.post(f"/admin/routines_app/routine/{routine.pk}/change/", form)
    assert response.status_code == 200 and "invalid cron expression" in response.content.decode()
    assert Routine.objects.get().schedule == {"cron": "0 8 * * *"}


def test_the_command_lists_shows_next_and_runs_one(owner, llm, profiles):
    routine = services.create(owner, {"name": "Morning", "instruction": "say hi", "schedule": {"cron": "0 8 * * *"}})
    out = io.StringIO()
    call_command("navi_routines", "list", stdout=out)
    assert f"{routine.pk}\towner\tMorning" in out.getvalue()
    out = io.StringIO()
    call_command("navi_routines", "next", stdout=out)
    assert "Morning" in out.getvalue()
    out = io.StringIO()
    call_command("navi_routines", "run", str(routine.pk), stdout=out)
    assert ": ok" in out.getvalue()
    assert RoutineRun.objects.get().status == "ok"
    with pytest.raises(CommandError, match="no routine 999"):
        call_command("navi_routines", "run", "999")
