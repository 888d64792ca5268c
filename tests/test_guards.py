"""The ledger of repairs (agent/toolcalling/guards/ledger.py): a small model's profile gets them, a
big model's runs none, each group can be switched off for a bench run, and the groups that fired
in a turn are kept with its last assistant message (`meta["guards"]`)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from agent.models import Profile
from agent.toolcalling.guards import ledger
from sessions_app.models import Message
from tests.llm_server import Turn
from tests.test_small_models import of, run, todo_items

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
ANSWER = json.dumps({"name": "answer"})
BIG, SMALL = 0, 3  # the profile's max_tools


@pytest.fixture(autouse=True)
def _plain_secretary(profiles):
    Profile.objects.update(planning_enabled=False)


async def _profile(max_tools: int) -> None:
    profile = await Profile.objects.aget(pk="secretary")
    await Profile.objects.filter(pk="secretary").aupdate(
        max_tools=max_tools, tool_calling=Profile.ToolCalling.AUTO, tool_policy={**profile.tool_policy, "filesystem": "allow"})


async def _grown_path(llm, session, owner, owner_token) -> str:
    """A write to "file_log.txt" for "the file log.txt": the path the call ran with."""
    from tools_app.workspace import workspace_for

    (workspace_for(owner.pk) / "log.txt").write_text("started\n")
    grown = json.dumps({"name": "filesystem", "arguments": {"action": "append", "path": "file_log.txt", "content": "finished\n"}})
    llm.script(Turn(content=grown), Turn(content=ANSWER), Turn(content="Appended."))
    frames = await run(session, owner_token, "Append a line saying 'finished' to the file log.txt.")
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Appended."
    return of(frames, "tool_call")[0]["args"]["path"]


async def _range_program(llm, session, owner_token) -> tuple[str, str]:
    """`sum(range(1, 12345))` for "from 1 to 12345", then an answer without the value: the
    program the call ran, and the answer shown."""
    decided = json.dumps({"name": "code_exec", "arguments": {"code": "sum(range(1, 12345))"}})
    llm.script(Turn(content=decided), Turn(content=ANSWER), Turn(content="Done."))
    frames = await run(session, owner_token, "Add up all the whole numbers from 1 to 12345 in Python.")
    return of(frames, "tool_call")[0]["args"]["code"], frames[-1]["content"]


async def _lone_dates(llm, session, owner_token) -> list[str]:
    """A todo of "dentist" split from its date, then more dates: the items kept."""
    call = json.dumps({"name": "todo", "arguments": {"action": "set", "tasks": ["dentist", "next Friday", "next Monday"]}})
    llm.script(Turn(content=call), Turn(content=ANSWER), Turn(content="Added."))
    await run(session, owner_token, "Add a todo 'dentist' for next Friday")
    return await todo_items(session)


async def _refusal(llm, session, owner_token) -> str:
    """A stock refusal written over a result the tool just returned: the answer the owner is shown."""
    call = json.dumps({"name": "todo", "arguments": {"action": "set", "tasks": ["buy milk"]}})
    refusal = "I'm sorry, but I can't assist with that request."
    llm.script(Turn(content=call), Turn(content=ANSWER), Turn(content=refusal), Turn(content="I put buy milk on your list."))
    frames = await run(session, owner_token, "Put buy milk on my todo list.")
    return frames[-1]["content"]


async def _fired(session) -> dict | None:
    """meta["guards"] of the session's last assistant message (None when absent)."""
    last = await Message.objects.filter(session=session, role="assistant").order_by("-seq").afirst()
    return last.meta.get("guards")


class TestABigModelsProfile:
    async def test_its_call_with_a_grown_path_runs_as_written(self, llm, session, owner, owner_token):
        await _profile(BIG)
        assert await _grown_path(llm, session, owner, owner_token) == "file_log.txt"

    async def test_its_program_runs_as_written(self, llm, session, owner_token, host_tools_allowed):
        await _profile(BIG)
        # programs: the range runs as written; values: its printed value is not added to the answer
        assert await _range_program(llm, session, owner_token) == ("sum(range(1, 12345))", "Done.")

    async def test_its_todo_items_are_kept_as_it_wrote_them(self, llm, session, owner_token):
        await _profile(BIG)
        items = await _lone_dates(llm, session, owner_token)
        assert [item.split(" (")[0] for item in items] == ["dentist", "next Friday", "next Monday"]

    async def test_its_refusal_is_its_answer(self, llm, session, owner_token):
        await _profile(BIG)
        assert await _refusal(llm, session, owner_token) == "I'm sorry, but I can't assist with that request."
        assert len(llm.requests) == 3  # no request asked again

    async def test_its_steps_were_constrained_and_its_setup_holds_no_guard(self, llm, session, owner_token, host_tools_allowed):
        await _profile(BIG)
        profile = await Profile.objects.aget(pk="secretary")
        assert not profile.is_small_model and ledger.active(profile) == frozenset()
        await _range_program(llm, session, owner_token)
        assert llm.requests[0].get("format")  # the same constrained step a small model takes: only the guards differ


class TestASmallModelsProfile:
    """The same scripts: each guard the big model's profile skipped fires here."""

    async def test_its_grown_path_is_put_right(self, llm, session, owner, owner_token):
        await _profile(SMALL)
        assert await _grown_path(llm, session, owner, owner_token) == "log.txt"

    async def test_its_range_keeps_the_end_the_request_said(self, llm, session, owner_token, host_tools_allowed):
        await _profile(SMALL)
        assert await _range_program(llm, session, owner_token) == (
            "sum(range(1, 12346))", "Done.\n\nThe program printed: `76205685`")

    async def test_its_lone_date_joins_the_item_before_it(self, llm, session, owner_token):
        await _profile(SMALL)
        items = await _lone_dates(llm, session, owner_token)
        assert len(items) == 1 and items[0].startswith("dentist, next Friday (")

    async def test_its_refusal_is_asked_again(self, llm, session, owner_token):
        await _profile(SMALL)
        assert await _refusal(llm, session, owner_token) == "I put buy milk on your list."

    async def test_a_group_switched_off_runs_as_for_a_big_model_and_the_others_still_run(
            self, llm, session, owner, owner_token, host_tools_allowed, settings):
        await _profile(SMALL)
        settings.NAVI_GUARDS_OFF = ["paths", "dates"]
        assert ledger.active(await Profile.objects.aget(pk="secretary")) == frozenset(ledger.NAMES) - {"paths", "dates"}
        assert await _grown_path(llm, session, owner, owner_token) == "file_log.txt"
        assert (await _range_program(llm, session, owner_token))[0] == "sum(range(1, 12346))"  # programs: still on
        items = await _lone_dates(llm, session, owner_token)
        assert [item.split(" (")[0] for item in items] == ["dentist", "next Friday", "next Monday"]


class TestWhatFiredIsKept:
    """A guard that acted is counted for the turn and kept with its last assistant message."""

    async def test_a_fixed_path_is_kept_with_the_answer(self, llm, session, owner, owner_token):
        await _profile(SMALL)
        await _grown_path(llm, session, owner, owner_token)
        assert await _fired(session) == {"paths": 1}

    async def test_a_big_models_identical_turn_keeps_none(self, llm, session, owner, owner_token, host_tools_allowed):
        await _profile(BIG)
        await _grown_path(llm, session, owner, owner_token)
        await _range_program(llm, session, owner_token)
        assert await Message.objects.filter(session=session, meta__has_key="guards").acount() == 0

    async def test_each_turn_keeps_its_own_groups(self, llm, session, owner, owner_token, host_tools_allowed):
        await _profile(SMALL)
        await _range_program(llm, session, owner_token)  # the range's end put in, the printed value shown
        assert await _fired(session) == {"programs": 1, "values": 1}
        await _refusal(llm, session, owner_token)
        assert await _fired(session) == {"refusals": 1}  # counted from none again

    async def test_the_dates_guard_inside_the_todo_tool_is_kept(self, llm, session, owner_token):
        await _profile(SMALL)
        await _lone_dates(llm, session, owner_token)
        assert await _fired(session) == {"dates": 1}

    async def test_a_group_switched_off_neither_fires_nor_is_kept(self, llm, session, owner, owner_token, settings):
        await _profile(SMALL)
        settings.NAVI_GUARDS_OFF = ["paths", "dates"]
        await _grown_path(llm, session, owner, owner_token)
        assert await _fired(session) is None
        await _lone_dates(llm, session, owner_token)
        assert await _fired(session) is None

    async def test_a_failed_turn_keeps_them_on_its_last_saved_assistant_message(self, llm, session, owner, owner_token):
        from tools_app.workspace import workspace_for

        await _profile(SMALL)
        (workspace_for(owner.pk) / "log.txt").write_text("started\n")
        grown = json.dumps({"name": "filesystem", "arguments": {"action": "append", "path": "file_log.txt",
                                                               "content": "finished\n"}})
        llm.script(Turn(content=grown), Turn(status=404, error='model "x" not found'))
        frames = await run(session, owner_token, "Append a line saying 'finished' to the file log.txt.")
        assert frames[-1]["type"] == "error"
        last = await Message.objects.filter(session=session, role="assistant").order_by("-seq").afirst()
        assert last.tool_calls and last.meta["guards"] == {"paths": 1}  # the call the path was fixed in

    def test_a_count_outside_a_turn_goes_nowhere_and_a_turn_counts_from_none(self):
        ledger.fired("paths")  # no turn: nothing counts, nothing raises
        assert ledger.tally() == {}
        with ledger.counting():
            ledger.fired("paths")
            ledger.fired("dates")
            ledger.fired("paths")
            assert ledger.tally() == {"paths": 2, "dates": 1}
            with ledger.counting():
                assert ledger.tally() == {}
        assert ledger.tally() == {}


class TestTheLedger:
    def test_a_switch_that_names_no_group_is_refused_with_the_groups(self, settings):
        settings.NAVI_GUARDS_OFF = ["programs", "pathz"]
        with pytest.raises(ImproperlyConfigured, match="pathz.*the groups are programs, values, paths"):
            ledger.switched_off()
        settings.NAVI_GUARDS_OFF = []
        assert ledger.switched_off() == frozenset()

    def test_every_guard_module_and_function_it_names_is_registered_and_exists(self):
        named = {g for group in ledger.GROUPS for g in group.guards}
        modules = {p.stem for p in (ROOT / "agent/toolcalling/guards").glob("*.py")} - {"__init__", "ledger"}
        assert modules <= {g.split(".")[1] for g in named if g.startswith("guards.")}  # no guard module unregistered
        for guard in named:
            place, _, function = guard.split(" ")[0].rpartition(".")
            path = ROOT / ("agent/toolcalling/" if place.startswith("guards") else "agent/" if place.startswith("turn") else "")
            path = path / (place.replace(".", "/") + ".py")
            names = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            assert function in names, guard

    def test_the_readme_table_has_a_row_per_group(self):
        readme = (ROOT / "agent/toolcalling/README.md").read_text()
        rows = [line.split("|")[1].strip(" `") for line in readme.splitlines() if line.startswith("| `")]
        assert rows == list(ledger.NAMES)
