"""A development split for `bench/agent_eval.py --split dev` (issue 40, fifth session): two-step
everyday requests written for this list only — other words and data than both splits — so the
two-step path can be tuned on failures that may be read, without reading held-out ones.

They are no part of the reported figures (`--split all` leaves them out, and the tuning and
held-out parts never count them); a run of them reports `summary.<mode>.dev`. Each asks for two
things in turn: read or look up or compute, then keep the result somewhere.
"""

from __future__ import annotations

from typing import Callable

from bench._eval_heldout import (
    all_of,
    fact_with,
    file_has,
    no_fact_with,
    number_in_file,
    seed_todo,
    todo_has,
    unchanged,
)
from bench._eval_tasks import PAGES, Run, Task, answer_has, facts, section, seed_fact, seed_files, todo_items

PAGES.update({
    "/dev/harvest.html": "<html><body><h1>Town events</h1><p>The Harvest Fair opens on Saturday 3 October "
    "at the market square. Entry is free.</p><p>The winter concert is sold out.</p></body></html>",
    "/dev/cafe.html": "<html><body><h1>Café Lumen</h1><p>Guest wifi: network LUMEN-GUEST, password "
    "oatmilk42.</p><p>Open daily 8–18.</p></body></html>",
    "/dev/varnholt.html": "<html><body><h1>Varnholt</h1><p>Varnholt is a port town in the north. It has a "
    "population of 18,406 and a lighthouse built in 1874.</p></body></html>",
    "/dev/parcel.json": '{"parcel": "RX-2291", "status": "out for delivery", "eta": "14:30"}',
    "/dev/recycling.html": "<html><body><h1>Kerbside collection</h1><p>The next glass collection in Ostbrook is on "
    "Tuesday 17 November.</p><p>Garden waste is collected monthly.</p></body></html>",
    "/dev/library.html": "<html><body><h1>Elm Street Library</h1><p>Opening hours: Mon–Sat 9–19.</p><p>Loans made "
    "this week are due back by Thursday 10 December.</p></body></html>",
})


def _d(name: str, message: str, check: Callable[[Run], str], setup: Callable[[Run], None] | None = None,
       needs: tuple[str, ...] = ()) -> Task:
    # A file written after a page was read asks first (the trust model): the request asked for it.
    approve = ("filesystem",) if "{web}" in message else ()
    return Task(f"dev_{name}", [message], check, setup, approve, needs=needs, split="dev", pair="dev")


def _scratch_has(name: str, *needles: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        text = section(run, name).lower().replace(",", "")
        missing = [n for n in needles if n.lower() not in text]
        return f"scratchpad {name!r} is {section(run, name)!r}, lacks {missing}" if missing else ""

    return check


def _todo_and_fact(todo_word: str, fact_word: str) -> Callable[[Run], str]:
    return all_of(todo_has(todo_word), fact_with(fact_word))


def _each_line_a_todo(run: Run) -> str:
    items = todo_items(run)
    text = " ".join(i["task"].lower() for i in items)
    missing = [w for w in ("gutter", "boiler", "smoke") if w not in text]
    return f"todo list lacks {missing}: {items}" if missing else ""


def _seed(*rows: tuple[str, str, str]) -> Callable[[Run], None]:
    def setup(run: Run) -> None:
        for category, key, value in rows:
            seed_fact(run, category, key, value)

    return setup


def _kept(*others: str) -> Callable[[Run], str]:
    """The other facts are all still there (forgetting one is not forgetting all)."""
    def check(run: Run) -> str:
        gone = [w for w in others if not any(w in f for f in facts(run))]
        return f"also forgotten: {gone} ({facts(run)})" if gone else ""

    return check


def _one_item_with(*words: str) -> Callable[[Run], str]:
    """One to-do item holds them all: the item written with the value found, not the value beside it."""
    def check(run: Run) -> str:
        found = [i for i in todo_items(run) if all(w in i["task"].lower() for w in words)]
        return "" if found else f"no todo item with {words}: {todo_items(run)}"

    return check


def answer_has_value(value: str) -> Callable[[Run], str]:
    """A recall's answer states the remembered value (from memory: no other source holds it)."""
    return lambda run: answer_has(run, value.lower())


def _fact_absent_elsewhere(run: Run) -> str:
    return "" if any("de89" in f.replace(" ", "") for f in facts(run)) else f"no IBAN fact: {facts(run)}"


CHORES = "clean the gutters\nservice the boiler\ntest the smoke alarms\n"
DOCTOR = "New GP from March:\nDr. Ines Varga\nHealth centre Nordkai, room 12\n"
BANK = "Account holder: me\nIBAN: DE89 3704 0044 0532 0130 00\nBank: Nordbank\n"
CONTACTS = "Plumber – Kowalski: 0171 448 2290\nElectrician – Brandt: 0152 901 3377\n"
INVITE = "You are invited to Lena's 40th!\nDate: 12 May, 19:30\nPlace: the boathouse\n"
POEM = "the fog comes\non little cat feet\nit sits looking\nover harbor and city\n"
TRIP = "item,cost\nferry,42\nhostel,96\nmuseum,18\n"
APP = '{"name": "tally", "version": "3.8.1", "debug": false}\n'

SHIFTS = "Week 49 rota\nMon early\nTue late\nWed off\nThu early\n"
KEYS = "spare keys\nfront door: with Mrs Adeyemi at no. 7\nbike shed: hook behind the boiler\n"

# Memory said in everyday words (issue 57): no "remember", "save" or "memory" in the saving ones.
MEMORY_TASKS: list[Task] = [
    _d("mem_keep_in_mind", "Keep in mind that my locker at the pool is number 214.", fact_with("214"), needs=("memory_save",)),
    _d("mem_dont_forget", "Don't forget: my niece Odile turns nine on 2 February.", fact_with("odile", "feb"),
       needs=("memory_save",)),
    _d("mem_note_that", "Note that I take my coffee with oat milk and no sugar.", fact_with("oat"), needs=("memory_save",)),
    _d("mem_fyi", "fyi my bike is a green Veloria Strada.", fact_with("veloria"), needs=("memory_save",)),
    _d("mem_plain_statement", "My landlady's name is Mrs Quist, in case it comes up later.", fact_with("quist"),
       needs=("memory_save",)),
    _d("mem_again", "What's my gym locker code again?", answer_has_value("5520"),
       _seed(("fitness", "gym locker code", "5520"), ("home", "alarm pin", "0913")), ("memory_search",)),
    _d("mem_remind_me", "Remind me of my passport number, please.", answer_has_value("C7T44R19"),
       _seed(("documents", "passport number", "C7T44R19")), ("memory_search",)),
    _d("mem_changed", "My dentist changed, it's now Dr. Haddad.", all_of(fact_with("haddad"), no_fact_with("moreau")),
       _seed(("health", "dentist", "Dr. Moreau")), ("memory_save",)),
    _d("mem_remove", "Remove my old work phone number from memory.",
       all_of(no_fact_with("0176 550"), _kept("ferreira")),
       _seed(("work", "old work phone", "0176 550 4412"), ("people", "manager", "Dana Ferreira")), ("memory_forget",)),
    _d("mem_you_can_forget", "You can forget my gym number, I cancelled the membership.",
       all_of(no_fact_with("88031"), _kept("tulip")),
       _seed(("fitness", "gym membership number", "88031"), ("garden", "favourite flower", "tulip")), ("memory_forget",)),
    _d("mem_shifts_then_keep", "Read shifts.txt, tell me which day I'm off, and keep that in mind.",
       all_of(fact_with("wed"), unchanged("shifts.txt", SHIFTS)), seed_files({"shifts.txt": SHIFTS}), ("filesystem",)),
]

# Two-part requests whose second half needs the first's result (issue 57), other words and data.
TWO_PART_TASKS: list[Task] = [
    _d("two_area_to_file", "Work out the area of a 7.5 by 4 metre room and write it into area.txt.",
       number_in_file("area.txt", "30", "30.0"), needs=("code_exec", "filesystem")),
    _d("two_minutes_to_scratch", "How many minutes are in 3.5 hours? Jot the answer in the scratchpad under 'time'.",
       _scratch_has("time", "210"), needs=("code_exec", "scratchpad")),
    _d("two_collection_todo", "Find the next glass collection date on {web}/dev/recycling.html and put it on my to-do list.",
       todo_has("17 nov"), needs=("web_view", "http_request")),
    _d("two_key_line_copy", "Copy the line about the bike shed from keys.txt into a new file shed.txt.",
       all_of(file_has("shed.txt", "hook behind the boiler"), unchanged("keys.txt", KEYS)),
       seed_files({"keys.txt": KEYS}), ("filesystem",)),
    _d("two_split_bill_note", "Three of us shared a 96 euro dinner. Work out each person's share and jot it in the "
       "scratchpad section 'dinner'.", _scratch_has("dinner", "32"), needs=("code_exec", "scratchpad")),
    _d("two_off_day_todo", "Look in shifts.txt for my day off and add 'bake bread on my day off' with that day to my to-do "
       "list.", all_of(_one_item_with("bread", "wed"), unchanged("shifts.txt", SHIFTS)), seed_files({"shifts.txt": SHIFTS}),
       ("filesystem",)),
]

UTILITIES = "utilities\nwater meter: in the cellar, left of the stairs\nboiler service: Kessler & Sohn, 0800 446 2190\n" \
            "internet: router in the hall cupboard\n"

# Written after the two-part mechanism (issue 57), to check it was not tuned to the six wordings
# above: other words and data, never tuned on.
FRESH_TWO_PART_TASKS: list[Task] = [
    _d("two_tickets_file", "A day ticket costs 23.40 euros. Calculate what 5 of them cost together and save the total "
       "in tickets.txt.", number_in_file("tickets.txt", "117", "117.0", "117.00"), needs=("code_exec", "filesystem")),
    _d("two_library_todo", "When are my library books due? It says on {web}/dev/library.html — add that date to my "
       "to-do list.", todo_has("10 dec"), needs=("web_view", "http_request")),
    _d("two_boiler_line", "Take the boiler service line out of utilities.txt and put it into a new file boiler.txt.",
       all_of(file_has("boiler.txt", "0800 446 2190"), unchanged("utilities.txt", UTILITIES)),
       seed_files({"utilities.txt": UTILITIES}), ("filesystem",)),
]

DEV_TASKS: list[Task] = [
    _d("page_event_todo", "There's an event listed on {web}/dev/harvest.html that's free — put it on my to-do list.",
       todo_has("harvest"), needs=("web_view", "http_request")),
    _d("page_wifi_memory", "Grab the guest wifi password from {web}/dev/cafe.html and keep it in your memory for me.",
       fact_with("oatmilk42"), needs=("web_view", "http_request")),
    _d("page_population_file", "How many people live in Varnholt? It says on {web}/dev/varnholt.html. "
       "Put the number in population.txt.", number_in_file("population.txt", "18406"), needs=("web_view", "http_request")),
    _d("json_status_scratch", "Check {web}/dev/parcel.json and note the parcel's status in the scratchpad under 'delivery'.",
       _scratch_has("delivery", "out for delivery"), needs=("http_request", "web_view")),
    _d("file_doctor_memory", "My new doctor's details are in doctor.txt. Please remember her name.",
       all_of(fact_with("varga"), unchanged("doctor.txt", DOCTOR)), seed_files({"doctor.txt": DOCTOR}), ("filesystem",)),
    _d("file_iban_memory", "Look up my IBAN in bank.txt and store it in your memory.",
       all_of(_fact_absent_elsewhere, unchanged("bank.txt", BANK)), seed_files({"bank.txt": BANK}), ("filesystem",)),
    _d("file_phone_copy", "Copy the electrician's phone number from contacts.txt into a new file electrician.txt.",
       all_of(file_has("electrician.txt", "0152 901 3377"), unchanged("contacts.txt", CONTACTS)),
       seed_files({"contacts.txt": CONTACTS}), ("filesystem",)),
    _d("file_chores_todo", "Turn the chores in chores.txt into to-do items for me.", _each_line_a_todo,
       seed_files({"chores.txt": CHORES}), ("filesystem",)),
    _d("json_version_scratch", "What version is in app.json? Write it down in the scratchpad section 'release'.",
       _scratch_has("release", "3.8.1"), seed_files({"app.json": APP}), ("filesystem",)),
    _d("words_to_file", "Count how many words poem.txt has and save that count to word_count.txt.",
       all_of(number_in_file("word_count.txt", "14"), unchanged("poem.txt", POEM)), seed_files({"poem.txt": POEM}),
       ("filesystem", "code_exec", "terminal")),
    _d("csv_budget_memory", "Total up the cost column in trip.csv and remember the total as my trip budget.",
       fact_with("156"), seed_files({"trip.csv": TRIP}), ("filesystem", "code_exec")),
    _d("invite_date_edit", "The party in invite.txt moved: change 12 May to 19 May in that file.",
       all_of(file_has("invite.txt", "19 May", "19:30", "boathouse"),
              lambda r: "" if "12 May" not in (r.file("invite.txt").read_text() if r.file("invite.txt").is_file() else "")
              else "12 May still in invite.txt"), seed_files({"invite.txt": INVITE}), ("filesystem",)),
    _d("vat_to_file", "Sales tax here is 7%. How much tax is that on a 1850 euro bike? Save the amount in vat.txt.",
       number_in_file("vat.txt", "129.5", "129.50"), needs=("code_exec", "filesystem")),
    _d("week_seconds_scratch", "How many seconds are there in a week? Keep the number in the scratchpad under 'facts'.",
       _scratch_has("facts", "604800"), needs=("code_exec", "scratchpad")),
    _d("lock_code_to_file", "Put my bike lock code — you have it in memory — into lock.txt.",
       number_in_file("lock.txt", "7391"), lambda r: seed_fact(r, "possessions", "bike lock code", "7391"),
       ("memory_search",)),
    _d("fact_and_todo", "Remember that my flight is LX 318, and add 'check in online' to my to-do list.",
       _todo_and_fact("check in", "lx 318"), needs=("memory_save", "todo")),
    _d("page_then_answer_todo", "Read {web}/dev/varnholt.html and add 'visit the lighthouse' to my todo list.",
       todo_has("lighthouse"), needs=("web_view", "http_request")),
    _d("mark_then_add", "I've done the first thing on my list; tick it off and add 'post the parcel'.",
       all_of(todo_has("post"), lambda r: "" if todo_items(r) and todo_items(r)[0]["status"] == "done"
              else f"first item not done: {todo_items(r)}"), seed_todo("renew insurance", "book MOT"), ("todo",)),
    *MEMORY_TASKS,
    *TWO_PART_TASKS,
    *FRESH_TWO_PART_TASKS,
]

