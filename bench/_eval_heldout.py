"""The evaluation's held-out half (issue 40): a split of the original 52 tasks frozen before any
tuning on it, and paraphrase pairs of everyday requests written for this split only.

The rule that made the split is fixed: the 52 original tasks sorted by name, every other one
(odd positions) held out. `HELDOUT_ORIGINAL` is that list written out, so a task added later
cannot shift the split; `tests/test_agent_eval.py` checks the two still agree. Every paraphrase
task is held out. Held-out failures are counted, never read while tuning: a change that raises
the tuning score and lowers the held-out one is reverted.

Each paraphrase pair asks for the same kind of thing in two wordings, with different data.
`Task.needs` names the tools one of which the first step must be offered
(bench/tool_offer.py measures that rate on every wording without a model).
"""

from __future__ import annotations

import json
import re
from typing import Callable

from bench._eval_tasks import (
    DAILY_TASKS,
    Run,
    Task,
    answer_has,
    any_ran,
    facts,
    first_problem,
    ran,
    read,
    section,
    seed_fact,
    seed_files,
    todo_items,
)

HELDOUT_ORIGINAL = (
    "code_primes", "count_lines_to_file", "csv_total", "file_append", "file_edit_time", "file_mkdir", "file_read",
    "file_write", "file_write_nested", "http_post", "list_profiles", "memory_and_todo", "memory_recall",
    "memory_save_colour", "memory_save_two", "memory_update", "scratchpad_two_notes", "shopping_list_add",
    "terminal_wc", "todo_create", "todo_mark_done", "todo_plan_then_mark", "unit_convert_scratchpad", "web_fact",
    "web_then_memory", "write_tool_then_use",
)


def heldout_by_rule(names: list[str]) -> list[str]:
    """The frozen rule: sorted by name, every other one (odd positions) held out."""
    return [name for i, name in enumerate(sorted(names)) if i % 2 == 1]


# The tool(s) the first step of each original task must be offered (one of them is enough).
NEEDS_ORIGINAL: dict[str, tuple[str, ...]] = {
    "todo_create": ("todo",), "todo_mark_done": ("todo",), "todo_plan_then_mark": ("todo",),
    "memory_save_colour": ("memory_save",), "memory_save_birthday": ("memory_save",),
    "memory_save_editor": ("memory_save",), "memory_recall": ("memory_search",), "memory_forget": ("memory_forget",),
    "memory_update": ("memory_save", "memory_search"), "file_write": ("filesystem",),
    "file_write_nested": ("filesystem",), "file_write_json": ("filesystem",), "file_append": ("filesystem",),
    "file_read": ("filesystem",), "file_list_count": ("filesystem", "terminal"), "file_mkdir": ("filesystem",),
    "file_move": ("filesystem",), "file_delete": ("filesystem",), "file_search": ("filesystem", "terminal"),
    "code_sum": ("code_exec",), "code_primes": ("code_exec",), "code_file": ("code_exec",),
    "csv_total": ("filesystem", "code_exec"), "web_fact": ("web_view", "http_request"),
    "web_capital": ("web_view", "http_request"), "http_get_json": ("http_request", "web_view"),
    "http_post": ("http_request",), "switch_profile": ("switch_profile",), "list_profiles": ("list_profiles",),
    "scratchpad_write": ("scratchpad",), "scratchpad_two_notes": ("scratchpad",), "write_tool_then_use": ("write_tool",),
    "write_tool": ("write_tool",), "test_tool": ("test_tool",), "tool_manual": ("tool_manual",),
    "list_tools": ("list_tools",), "terminal_wc": ("terminal",), "memory_and_todo": ("memory_save", "todo"),
    "todo_next_friday": ("todo",), "csv_sum_to_file": ("filesystem", "code_exec"),
    "web_then_memory": ("web_view", "http_request"), "web_price_to_file": ("web_view", "http_request"),
    "unit_convert_scratchpad": ("scratchpad", "code_exec"), "json_value_to_file": ("filesystem",),
    "count_lines_to_file": ("filesystem", "terminal", "code_exec"), "todo_from_email": ("filesystem",),
    "memory_to_file": ("memory_search",), "shopping_list_add": ("filesystem",), "file_edit_time": ("filesystem",),
    "expense_add_row": ("filesystem",), "memory_save_two": ("memory_save",), "scratchpad_from_file": ("filesystem",),
}

# --- checkers ------------------------------------------------------------------------------------
def fact_with(*words: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        found = [f for f in facts(run) if all(w in f for w in words)]
        return "" if found else f"no memory fact with {words}: {facts(run)}"

    return check


def no_fact_with(word: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        left = [f for f in facts(run) if word in f]
        return f"still remembered: {left}" if left else ""

    return check


def todo_has(*words: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        text = " ".join(i["task"].lower() for i in todo_items(run))
        missing = [w for w in words if w not in text]
        return f"todo list lacks {missing}: {todo_items(run)}" if missing else ""

    return check


def todo_statuses(expected: list[str]) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        got = [i["status"] for i in todo_items(run)]
        return "" if got == expected else f"statuses are {got}, expected {expected}"

    return check


def seed_todo(*tasks: str) -> Callable[[Run], None]:
    def setup(run: Run) -> None:
        items = [{"task": t, "status": "pending"} for t in tasks]
        run.write("INSERT INTO tools_app_todolist (scope, items, updated_at) VALUES (?, ?, datetime('now'))",
                  run.session_id, json.dumps(items))

    return setup


def file_has(rel: str, *needles: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        got = read(run, rel)
        ok = got is not None and all(n.lower() in got.lower() for n in needles)
        return "" if ok else f"{rel} is {got!r}, expected {needles}"

    return check


def unchanged(rel: str, content: str) -> Callable[[Run], str]:
    """A file the request only reads must still hold what it held (issue 40: do no harm)."""
    def check(run: Run) -> str:
        got = read(run, rel)
        return "" if got == content else f"{rel} was changed (it was only to be read): {got!r}"

    return check


def number_in_file(rel: str, *numbers: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        got = (read(run, rel) or "").replace(",", "")
        pattern = "|".join(re.escape(n) for n in numbers)
        if read(run, rel) is not None and re.search(rf"(?<![\d.])({pattern})(?![\d]|\.\d)", got):
            return ""
        return f"{rel} is {read(run, rel)!r}, expected {' or '.join(numbers)}"

    return check


def profile_is(slug: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        rows = run.sql("SELECT profile_id FROM sessions_app_session WHERE id = ?", run.session_id.replace("-", ""))
        return "" if rows and rows[0][0] == slug else f"session profile is {rows}, expected {slug}"

    return check


def all_of(*checks: Callable[[Run], str]) -> Callable[[Run], str]:
    return lambda run: first_problem(*(c(run) for c in checks))


REMINDER = "Team sync on Thursday. The meeting moved to room Orchid on the 4th floor.\n"
WIFI = "Network: HARBOR-5G\nPassword: on the card in the kitchen drawer\n"
PROGRESS = "chapter 1 done\nchapter 2 done\n"
MEETING = "Meeting in room A4 at 14:00 with Jo.\n"
LANDLORD = "Landlord: Mr Berg\nPhone: 0470 22 19 85\nRent due on the 1st.\n"


def _progress_appended(run: Run) -> str:
    lines = [line.strip() for line in (read(run, "progress.txt") or "").splitlines() if line.strip()]
    expected = ["chapter 1 done", "chapter 2 done", "chapter 3 done"]
    return "" if lines == expected else f"progress.txt lines: {lines}"


def _meeting_room(run: Run) -> str:
    got = read(run, "meeting.txt") or ""
    ok = "B12" in got and "A4" not in got and "14:00" in got and "Jo" in got
    return "" if ok else f"meeting.txt is {got!r}"


def _ferry_todo(run: Run) -> str:
    items = [i["task"] for i in todo_items(run)]
    ok = any(re.search(r"0?6[:.]40", item) for item in items)
    return first_problem(any_ran(run, "web_view", "http_request"), "" if ok else f"no todo item with 06:40: {items}")


# --- the paraphrase pairs ---------------------------------------------------------------------------
def _pair(kind: str, needs: tuple[str, ...], *tasks: Task) -> list[Task]:
    for i, task in enumerate(tasks):
        task.name = f"para_{kind}_{'ab'[i]}"
        task.needs = needs
        task.split = "heldout"
        task.pair = kind
    return list(tasks)


def _t(message: str, check: Callable[[Run], str], setup: Callable[[Run], None] | None = None,
       approve: tuple[str, ...] = ()) -> Task:
    return Task("", [message], check, setup, approve)


PARAPHRASE_TASKS: list[Task] = [
    *_pair("note_fact", ("memory_save",),
           _t("Jot this down for later: the spare key is under the blue flowerpot.", fact_with("flowerpot")),
           _t("Please keep in mind that my bike lock code is 4182.", fact_with("4182"))),
    *_pair("recall_fact", ("memory_search",),
           _t("Do you know when my mother's birthday is?", lambda r: answer_has(r, "june"),
              lambda r: seed_fact(r, "family", "mother birthday", "2 June")),
           _t("Which blood type did I tell you I have?", lambda r: answer_has(r, "ab"),
              lambda r: seed_fact(r, "health", "blood type", "AB negative"))),
    *_pair("forget_fact", ("memory_forget",),
           _t("I no longer go to the gym, so drop my gym membership from what you know about me.",
              no_fact_with("fithub"), lambda r: seed_fact(r, "fitness", "gym membership", "Member of FitHub")),
           _t("My old phone number is gone, delete it from your notes about me.", no_fact_with("0192"),
              lambda r: seed_fact(r, "contact", "phone number", "+47 555 0192"))),
    *_pair("start_checklist", ("todo",),
           _t("Things to get done this weekend: wash the car, fix the fence, return the library books.",
              todo_has("car", "fence", "library")),
           _t("Start a checklist for me: book flights, renew passport, buy sunscreen.",
              todo_has("flight", "passport", "sunscreen"))),
    *_pair("tick_off", ("todo",),
           _t("I finished the second item on my list, tick it off.", todo_statuses(["pending", "done", "pending"]),
              seed_todo("water plants", "pay invoice", "call Sam")),
           _t("Cross off the first thing on my checklist, it's done.", todo_statuses(["done", "pending"]),
              seed_todo("book hotel", "pack bags"))),
    *_pair("multiply", ("code_exec",),
           _t("How much is 4096 multiplied by 37? Work it out with Python.",
              lambda r: first_problem(ran(r, "code_exec"), answer_has(r, "151552"))),
           _t("Using a quick program, tell me what 2 to the power of 20 is.",
              lambda r: first_problem(ran(r, "code_exec"), answer_has(r, "1048576")))),
    *_pair("arithmetic", ("code_exec",),
           _t("What is the total of every whole number between 1 and 5000, inclusive?", lambda r: answer_has(r, "12502500")),
           _t("How many numbers below 500 are divisible by 7 or by 11?", lambda r: answer_has(r, "110"))),
    *_pair("read_note", ("filesystem",),
           _t("What does my note in reminder.txt say about the meeting room?",
              all_of(lambda r: answer_has(r, "orchid"), unchanged("reminder.txt", REMINDER)),
              seed_files({"reminder.txt": REMINDER})),
           _t("Open wifi.txt and tell me the network name.",
              all_of(lambda r: answer_has(r, "harbor-5g"), unchanged("wifi.txt", WIFI)), seed_files({"wifi.txt": WIFI}))),
    *_pair("save_text", ("filesystem",),
           _t("Save the sentence 'Call Mum on Sunday' into a file called reminder_sunday.txt.",
              file_has("reminder_sunday.txt", "Call Mum on Sunday")),
           _t("Put 'pick up dry cleaning' in a new text file named errands.txt.",
              file_has("errands.txt", "pick up dry cleaning"))),
    *_pair("edit_file", ("filesystem",),
           _t("Add the line 'chapter 3 done' at the end of progress.txt.", _progress_appended,
              seed_files({"progress.txt": PROGRESS})),
           _t("In meeting.txt the room should be B12 instead of A4, please fix that.", _meeting_room,
              seed_files({"meeting.txt": MEETING}))),
    *_pair("page_fact", ("web_view", "http_request"),
           _t("When does the first ferry to Skerra leave? The timetable is at {web}/ferry.html.",
              lambda r: first_problem(any_ran(r, "web_view", "http_request"), answer_has(r, "6:40"))),
           _t("{web}/museum.html - how much is a ticket for the museum?",
              lambda r: first_problem(any_ran(r, "web_view", "http_request"), answer_has(r, "14")))),
    *_pair("api_status", ("http_request", "web_view"),
           _t("Check the status of my order at {web}/api/order.json.",
              lambda r: first_problem(any_ran(r, "http_request", "web_view"), answer_has(r, "shipped"))),
           _t("Is the backup service healthy? Its status API is {web}/api/health.json.",
              lambda r: first_problem(any_ran(r, "http_request", "web_view"), answer_has(r, "degraded")))),
    *_pair("working_note", ("scratchpad",),
           _t("Keep a working note under 'status': deployment paused until Monday.",
              lambda r: "" if "paused" in section(r, "status").lower() else f"section status is {section(r, 'status')!r}"),
           _t("In your notepad, under the heading 'ideas', write down: try the rooftop bar.",
              lambda r: "" if "rooftop" in section(r, "ideas").lower() else f"section ideas is {section(r, 'ideas')!r}")),
    *_pair("personas", ("list_profiles",),
           _t("What assistant modes do you have?",
              lambda r: first_problem(ran(r, "list_profiles"), answer_has(r, "secretary", "server_admin", "smart_home"))),
           _t("Show me the profiles I can switch you to.",
              lambda r: first_problem(ran(r, "list_profiles"), answer_has(r, "secretary", "server_admin", "smart_home")))),
    *_pair("change_role", ("switch_profile",),
           _t("Become my home automation assistant for this chat (the smart_home profile).", profile_is("smart_home")),
           _t("Change your role to the server administrator profile, server_admin.", profile_is("server_admin"))),
    *_pair("page_then_todo", ("web_view", "http_request"),
           _t("Look at {web}/ferry.html and put the first departure time on my to-do list.", _ferry_todo,
              approve=("todo",)),
           _t("Find the museum ticket price on {web}/museum.html and remember it for me.",
              lambda r: first_problem(any_ran(r, "web_view", "http_request"), fact_with("14")(r)),
              approve=("memory_save",))),
    *_pair("file_then_memory", ("filesystem",),
           _t("Read landlord.txt and remember my landlord's phone number.",
              all_of(fact_with("0470"), unchanged("landlord.txt", LANDLORD)), seed_files({"landlord.txt": LANDLORD})),
           _t("wifi.txt has my home network's name: store it in your memory.",
              all_of(fact_with("harbor-5g"), unchanged("wifi.txt", WIFI)), seed_files({"wifi.txt": WIFI}))),
    *_pair("compute_then_write", ("code_exec", "filesystem"),
           _t("Work out 15% of 240 and write the answer into tip.txt.", number_in_file("tip.txt", "36", "36.0")),
           _t("Calculate the average of 12, 18 and 27, then save it in avg.txt.", number_in_file("avg.txt", "19", "19.0"))),
]

TWO_STEP_PAIRS = ("page_then_todo", "file_then_memory", "compute_then_write")
_DAILY = frozenset(t.name for t in DAILY_TASKS)  # the original everyday tasks: two steps each


def prepare(originals: list[Task]) -> list[Task]:
    """Every task of the evaluation: the original ones with their split and needs set, then the
    paraphrase pairs (all held out)."""
    for task in originals:
        task.split = "heldout" if task.name in HELDOUT_ORIGINAL else "tuning"
        task.needs = NEEDS_ORIGINAL[task.name]
    return originals + PARAPHRASE_TASKS


def is_two_step(task: Task) -> bool:
    """A request with two parts that need two tools in turn (read then save, compute then write)."""
    return task.name in _DAILY or task.pair in TWO_STEP_PAIRS
