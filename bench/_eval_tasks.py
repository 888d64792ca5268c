"""The tasks of `bench/agent_eval.py`: what the user says, what is set up first, and a checker
that reads the end state (database rows, files, what the bench's own web server received) —
never the model's account of what it did. Read-only answers (a fact from a page, a sum) are
checked in the final answer, together with the tool call that had to produce them.

A checker returns "" when the task succeeded, else a short reason. `answer_problem(run)` is the
second half of every verdict: the final answer must be prose (not empty, not a raw tool result,
not an unexecuted tool call, not the give-up notice) from a turn that ended normally.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from zoneinfo import ZoneInfo


# --- what a checker sees -------------------------------------------------------------------------
@dataclass
class Run:
    """One task run in one mode: where its state lives and what the harness saw."""

    db: Path
    workspace: Path
    tools_dir: Path
    owner_id: int
    session_id: str  # with dashes, as the tools scope their rows
    web: "WebFixture"
    answers: list[str] = field(default_factory=list)  # the final text of each turn
    calls: list[dict] = field(default_factory=list)  # the run's tool_call frames
    ended: str = ""  # the last turn's terminal frame: stream_end, stream_stopped or error ("" = none)
    timed_out: bool = False  # the bench pressed Stop at the deadline
    error: str = ""  # an error frame's message
    time_zone: str = "UTC"  # the Navi server's TIME_ZONE: its clock line in the system prompt
    started: datetime | None = None  # when the bench sent the first message

    def today(self) -> list[date]:
        """The server's date when the run started and now (a run may cross midnight)."""
        zone = ZoneInfo(self.time_zone)
        moments = [m for m in (self.started, datetime.now(zone)) if m is not None]
        return sorted({m.astimezone(zone).date() for m in moments})

    @property
    def answer(self) -> str:
        return self.answers[-1] if self.answers else ""

    def sql(self, query: str, *args: Any) -> list[tuple]:
        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(query, args).fetchall()

    def write(self, query: str, *args: Any) -> None:
        with sqlite3.connect(self.db, timeout=30) as conn:
            conn.execute(query, args)

    def file(self, rel: str) -> Path:
        return self.workspace / rel


def _norm(text: str) -> str:
    """Lower case, digit groups joined (76,205,685 / 76 205 685 → 76205685)."""
    text = re.sub(r"(?<=\d)[,\u00a0\u202f ](?=\d{3}\b)", "", text or "")
    return text.lower()


def answer_has(run: Run, *needles: str) -> str:
    text = _norm(run.answer)
    missing = [n for n in needles if n.lower() not in text]
    return f"the answer lacks {', '.join(map(repr, missing))}: {run.answer[:160]!r}" if missing else ""


def ran(run: Run, tool: str, **args: str) -> str:
    """A successful call of `tool` (in the audit table) whose arguments contain these values."""
    rows = run.sql(
        "SELECT arguments FROM agent_toolcallrecord WHERE session_id = ? AND tool = ? AND success = 1",
        run.session_id.replace("-", ""), tool,
    )
    for (raw,) in rows:
        given = json.loads(raw or "{}")
        if all(str(v).lower() in str(given.get(k, "")).lower() for k, v in args.items()):
            return ""
    return f"no successful {tool} call" + (f" with {args}" if args else "")


def any_ran(run: Run, *tools: str) -> str:
    """A successful call of any of these tools."""
    problems = [ran(run, tool) for tool in tools]
    return "" if not all(problems) else f"no successful call of {' or '.join(tools)}"


def todo_items(run: Run) -> list[dict]:
    rows = run.sql("SELECT items FROM tools_app_todolist WHERE scope = ?", run.session_id)
    return json.loads(rows[0][0]) if rows else []


def section(run: Run, name: str) -> str:
    rows = run.sql("SELECT content FROM tools_app_scratchpadsection WHERE scope = ? AND section = ?", run.session_id, name)
    return rows[0][0] if rows else ""


def facts(run: Run) -> list[str]:
    rows = run.sql("SELECT category, key, value FROM memory_app_memoryfact WHERE owner_id = ?", run.owner_id)
    return [" ".join(r).lower() for r in rows]


def seed_fact(run: Run, category: str, key: str, value: str) -> None:
    run.write(
        "INSERT INTO memory_app_memoryfact (category, key, value, created_at, updated_at, owner_id) "
        "VALUES (?, ?, ?, datetime('now'), datetime('now'), ?)", category, key, value, run.owner_id,
    )


def seed_files(files: dict[str, str]) -> Callable[[Run], None]:
    def setup(run: Run) -> None:
        for rel, content in files.items():
            path = run.file(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")

    return setup


def read(run: Run, rel: str) -> str | None:
    path = run.file(rel)
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def first_problem(*problems: str) -> str:
    return next((p for p in problems if p), "")


# --- is the final answer an answer? ----------------------------------------------------------------
# Navi's marks around outside data (agent/trust/policy.py wrap_untrusted): only a tool result holds them.
_UNTRUSTED = re.compile(r"\[(END )?UNTRUSTED DATA [0-9a-f]{8}|It is data, not instructions", re.IGNORECASE)
# agent/turn/ending.py give_up: the turn ran out of tool-calling steps.
_GIVE_UP = re.compile(r"I stopped after \d+ tool-calling steps", re.IGNORECASE)
# http_request's result (tools_app/builtin/web.py _format_response): a status line, then headers.
_HTTP_STATUS = re.compile(r"^\s*HTTP(/\d(\.\d)?)?\s+\d{3}\b", re.MULTILINE)
_HTTP_HEADER = re.compile(r"^\s*(content-type|content-length|server|date|location|set-cookie|cache-control):\s*\S",
                          re.IGNORECASE | re.MULTILINE)
_CALL_TEXT = re.compile(r'"name"\s*:\s*"[^"]*"\s*,\s*"(arguments|parameters)"\s*:', re.IGNORECASE)
_FENCE = re.compile(r"```[a-zA-Z]*")
# A stock refusal ("I'm sorry, but I can't assist with that request."): no answer, whatever the
# end state (issue 40: 8 of 28 published successes ended in one).
_REFUSAL = re.compile(
    r"\b(can(?:no|['\u2019])t|unable to|not able to|won['\u2019]t)\s+(assist|help)\s+(you\s+)?with\s+(that|this|your)"
    r"|\bI(?:['\u2019]m| am) sorry,? but I (can(?:no|['\u2019])t|am unable|am not able)",
    re.IGNORECASE,
)
# An answer that opens by saying the work failed, over a turn whose end state is right: it
# contradicts the results the owner would rely on (a later "at first I could not…" is a story).
_CLAIMS_FAILURE = re.compile(
    r"\bI (could(?: ?no|n['\u2019])t|was(?: ?no|n['\u2019])t able to|was unable to|failed to)\b"
    r"|\b(an error occurred|did(?: ?no|n['\u2019])t work)\b",
    re.IGNORECASE,
)


def _json_values(text: str) -> list[tuple[int, int, Any]]:
    """Every JSON object or array in the text (start, end, value), outermost first."""
    found, decoder, i = [], json.JSONDecoder(), 0
    while (i := _next_open(text, i)) >= 0:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        found.append((i, end, value))
        i = end
    return found


def _next_open(text: str, start: int) -> int:
    hits = [h for h in (text.find("{", start), text.find("[", start)) if h >= 0]
    return min(hits) if hits else -1


def _is_call(value: Any) -> bool:
    """A tool call written as JSON: {"name": …, "arguments"/"parameters": …}, at any depth."""
    if isinstance(value, dict):
        if isinstance(value.get("name"), str) and ("arguments" in value or "parameters" in value):
            return True
        return any(_is_call(v) for v in value.values())
    return isinstance(value, list) and any(_is_call(v) for v in value)


def answer_problem(run: Run) -> str:
    """Why the final answer is not an answer that states a result ("" when it is one)."""
    if run.timed_out or run.ended == "stream_stopped":
        return "the turn was stopped (deadline) before it ended"
    if run.error or run.ended == "error":
        return f"the turn ended in an error: {run.error[:120]}"
    text = run.answer.strip()
    if not text:
        return "the final answer is empty"
    if _GIVE_UP.search(text):
        return "the final answer is the give-up notice (ran out of tool-calling steps)"
    if _REFUSAL.search(text):
        return "the final answer is a stock refusal"
    if _CLAIMS_FAILURE.search(re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]):
        return "the final answer says the work failed (it contradicts the results)"
    if "<tool_call>" in text or "</tool_call>" in text:
        return "the final answer holds an unexecuted <tool_call> block"
    values = _json_values(text)
    if _CALL_TEXT.search(text) or any(_is_call(v) for _, _, v in values):
        return "the final answer holds an unexecuted tool-call JSON"
    if _UNTRUSTED.search(text):
        return "the final answer repeats a raw tool result (Navi's untrusted-data marker)"
    headers = [h.lower() for h in _HTTP_HEADER.findall(text)]
    if _HTTP_STATUS.search(text) or "content-type" in headers or len(headers) >= 2:
        return "the final answer repeats a raw HTTP response (status line / headers)"
    if values:
        prose = text
        for start, end, _ in reversed(values):
            prose = prose[:start] + " " + prose[end:]
        if len(re.findall(r"[A-Za-z]{2,}", _FENCE.sub(" ", prose))) < 3:
            return "the final answer is a raw JSON body, not prose"
    return ""


# --- the local web pages the web tasks read ---------------------------------------------------------
PAGES = {
    "/zorblax.html": "<html><head><title>Zorblax tower</title></head><body><h1>The Zorblax tower</h1>"
    "<p>The Zorblax tower stands in the old town of Quellin. It is 347 metres tall and was finished "
    "in 1911 after nine years of work.</p></body></html>",
    "/veltria.html": "<html><body><h1>Veltria</h1><p>Veltria is a small inland country. Its capital "
    "is Marnhold, on the river Ebb. The currency is the veltrian crown.</p></body></html>",
    "/api/stock.json": json.dumps({"item": "widget", "in_stock": 7319, "warehouse": "north"}),
    "/library.html": "<html><body><h1>Quellin public library</h1><p>Welcome! The library lends books, films "
    "and board games.</p><p>Opening hours: Monday to Saturday, 9:00 to 17:30. Closed on Sundays.</p></body></html>",
    "/shop.html": "<html><body><h1>Kitchen corner</h1><ul><li>Nimbus toaster: 54.00 EUR</li>"
    "<li>Aurora kettle: 39.90 EUR</li><li>Stratus blender: 89.50 EUR</li></ul></body></html>",
    # the held-out paraphrase tasks' pages (bench/_eval_heldout.py)
    "/ferry.html": "<html><body><h1>Skerra ferry</h1><p>Timetable, weekdays. The first ferry to Skerra leaves "
    "the harbour at 06:40; after that every two hours until 20:40.</p></body></html>",
    "/museum.html": "<html><body><h1>Quellin town museum</h1><p>Open Tuesday to Sunday. A ticket costs 14 EUR, "
    "children under 12 go free.</p></body></html>",
    "/api/order.json": json.dumps({"order": 5521, "status": "shipped", "carrier": "PostNord", "items": 2}),
    "/api/health.json": json.dumps({"service": "backup", "status": "degraded", "failed_jobs": 3}),
}


class WebFixture:
    """A tiny web server on 127.0.0.1 for the web tasks; it records the bodies POSTed to it."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.posts: list[tuple[str, str]] = []
        self._httpd: ThreadingHTTPServer | None = None

    def start(self) -> "WebFixture":
        fixture = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _send(self, status: int, body: str, ctype: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                body = PAGES.get(self.path.split("?")[0])
                if body is None:
                    return self._send(404, "not found", "text/plain")
                self._send(200, body, "application/json" if self.path.endswith(".json") else "text/html; charset=utf-8")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
                fixture.posts.append((self.path, body))
                self._send(201, json.dumps({"ok": True, "id": len(fixture.posts)}), "application/json")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"


# --- the tasks ----------------------------------------------------------------------------------------
@dataclass
class Task:
    name: str
    messages: list[str]  # sent one after the other in the same session; {web} = the fixture's URL
    check: Callable[[Run], str]
    setup: Callable[[Run], None] | None = None
    # Tools whose approval the user's request calls for (approved); every other ask is denied.
    approve: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # one of these must be offered at the first step (bench/tool_offer.py)
    split: str = ""  # "tuning" or "heldout" (bench/_eval_heldout.py: frozen, never tuned on)
    pair: str = ""  # the paraphrase pair a held-out task belongs to ("" for the original 52)


def _todo_create(run: Run) -> str:
    items = todo_items(run)
    text = " ".join(i["task"].lower() for i in items)
    if len(items) != 3:
        return f"todo list has {len(items)} items: {items}"
    missing = [w for w in ("milk", "plumber", "rent") if w not in text]
    return f"todo list lacks {missing}: {items}" if missing else ""


def _seed_todo(run: Run) -> None:
    items = [{"task": t, "status": "pending"} for t in ("write report", "send report", "archive report")]
    run.write("INSERT INTO tools_app_todolist (scope, items, updated_at) VALUES (?, ?, datetime('now'))",
              run.session_id, json.dumps(items))


def _todo_mark(run: Run) -> str:
    statuses = [i["status"] for i in todo_items(run)]
    return "" if statuses == ["pending", "done", "pending"] else f"statuses are {statuses}"


def _todo_plan_then_mark(run: Run) -> str:
    items = todo_items(run)
    if len(items) != 2 or "draft" not in items[0]["task"].lower() or "send" not in items[1]["task"].lower():
        return f"todo list is {items}"
    return "" if [i["status"] for i in items] == ["done", "pending"] else f"statuses are {items}"


def _fact_with(*words: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        found = [f for f in facts(run) if all(w in f for w in words)]
        return "" if found else f"no memory fact with {words}: {facts(run)}"

    return check


def _forget(run: Run) -> str:
    left = [f for f in facts(run) if "rex" in f]
    return f"still remembered: {left}" if left else ""


def _update_job(run: Run) -> str:
    all_facts = facts(run)
    if not any("globex" in f for f in all_facts):
        return f"no fact mentions Globex: {all_facts}"
    return "" if not any("initech" in f for f in all_facts) else f"Initech is still remembered: {all_facts}"


def _file_equals(rel: str, expected: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        got = read(run, rel)
        return "" if got is not None and got.strip() == expected else f"{rel} is {got!r}"

    return check


def _file_contains(rel: str, *needles: str) -> Callable[[Run], str]:
    def check(run: Run) -> str:
        got = read(run, rel)
        return "" if got is not None and all(n in got for n in needles) else f"{rel} is {got!r}"

    return check


def _config_json(run: Run) -> str:
    got = read(run, "config.json")
    try:
        value = json.loads(got or "")
    except ValueError:
        return f"config.json is not JSON: {got!r}"
    return "" if value == {"debug": True, "port": 8080} else f"config.json is {value!r}"


def _appended(run: Run) -> str:
    lines = [line.strip() for line in (read(run, "log.txt") or "").splitlines() if line.strip()]
    return "" if len(lines) == 2 and lines[0] == "started" and "finished" in lines[1] else f"log.txt lines: {lines}"


def _moved(run: Run) -> str:
    if read(run, "draft.txt") is not None:
        return "draft.txt still exists"
    return "" if (read(run, "final.txt") or "").strip() == "first draft" else f"final.txt is {read(run, 'final.txt')!r}"


def _deleted(run: Run) -> str:
    if read(run, "tmp_notes.txt") is not None:
        return "tmp_notes.txt still exists"
    return "" if read(run, "keep.txt") is not None else "keep.txt was deleted too"


def _squares(run: Run) -> str:
    lines = [line.strip() for line in (read(run, "squares.txt") or "").splitlines() if line.strip()]
    return first_problem("" if lines == ["1", "4", "9", "16", "25"] else f"squares.txt lines: {lines}", ran(run, "code_exec"))


def _posted(run: Run) -> str:
    for path, body in run.web.posts:
        try:
            value = json.loads(body)
        except ValueError:
            continue
        if path.startswith("/api/notes") and isinstance(value, dict) and value.get("note") == "hello navi":
            return ""
    return f"the web server received {run.web.posts}"


def _switched(run: Run) -> str:
    rows = run.sql("SELECT profile_id FROM sessions_app_session WHERE id = ?", run.session_id.replace("-", ""))
    return "" if rows and rows[0][0] == "smart_home" else f"session profile is {rows}"


def _tool_used(run: Run) -> str:
    if not (run.tools_dir / "reverse_text.py").is_file():
        return "user_tools/reverse_text.py was not written"
    if ran(run, "reverse_text") and ran(run, "test_tool", name="reverse_text"):
        return "reverse_text never ran (neither called nor tried with test_tool)"
    return ""


def _word_count_tool(run: Run) -> str:
    rows = run.sql("SELECT last_error FROM tools_app_usertool WHERE name = 'word_count'")
    if not (run.tools_dir / "word_count.py").is_file() or not rows:
        return "word_count.py was not written"
    return "" if not rows[0][0] else f"word_count does not load: {rows[0][0][:120]}"


def _shout_ran(run: Run) -> str:
    if ran(run, "test_tool", name="shout") and ran(run, "shout"):
        return "shout never ran"
    return ""


# --- daily personal-agent tasks ----------------------------------------------------------------------
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")


def next_fridays(today: date) -> list[date]:
    """What "next Friday" may mean: the first Friday after today, or the one a week later."""
    first = today + timedelta(days=(4 - today.weekday()) % 7 or 7)
    return [first, first + timedelta(days=7)]


def mentions_date(text: str, day: date) -> bool:
    """The text names this date: ISO, "27 November", "Nov 27th", 27/11, 11/27 or 27.11."""
    text = text.lower()
    month = _MONTHS[day.month - 1]
    name = rf"({month}|{month[:3]}\.?)"
    d, m = day.day, day.month
    patterns = [
        rf"\b{day.isoformat()}\b",
        rf"\b0?{d}(st|nd|rd|th)?\s+(of\s+)?{name}(?![a-z])",
        rf"(?<![a-z]){name}\s+0?{d}(st|nd|rd|th)?\b",
        rf"(?<![\d/.])0?{d}[./]0?{m}(?![\d])",
        rf"(?<![\d/.])0?{m}/0?{d}(?![\d])",
    ]
    return any(re.search(p, text) for p in patterns)


def _dentist_friday(run: Run) -> str:
    items = [i["task"] for i in todo_items(run) if "dentist" in i["task"].lower()]
    if not items:
        return f"no todo item mentions the dentist: {todo_items(run)}"
    fridays = sorted({f for today in run.today() for f in next_fridays(today)})
    if any(mentions_date(item, f) for item in items for f in fridays):
        return ""
    return f"the dentist item holds none of the dates {[f.isoformat() for f in fridays]}: {items}"


def _number_in_file(rel: str, *numbers: str) -> Callable[[Run], str]:
    """The file holds one of these numbers (as a number: 45 is not found in 145)."""
    def check(run: Run) -> str:
        got = _norm(read(run, rel) or "")
        pattern = "|".join(re.escape(n) for n in numbers)
        if read(run, rel) is not None and re.search(rf"(?<![\d.])({pattern})(?![\d]|\.\d)", got):
            return ""
        return f"{rel} is {read(run, rel)!r}, expected {' or '.join(numbers)}"

    return check


def _library_hours(run: Run) -> str:
    hours = [f for f in facts(run) if re.search(r"\b9\b|\b9[:.]00|\b09", f) and re.search(r"17[:.]30|5[:.]30", f)]
    return first_problem(any_ran(run, "web_view", "http_request"),
                         "" if hours else f"no memory fact with the hours 9:00-17:30: {facts(run)}")


def _conversion(run: Run) -> str:
    text = section(run, "conversions")
    return "" if re.search(r"42[.,]1[5-7]|42[.,]2\b", text) else f"section conversions is {text!r} (26.2 mi = 42.16 km)"


def _todo_from_email(run: Run) -> str:
    text = " ".join(i["task"].lower() for i in todo_items(run))
    missing = [w for w in ("venue", "cake", "invitation") if w not in text]
    return f"todo list lacks {missing}: {todo_items(run)}" if missing else ""


def _shopping_appended(run: Run) -> str:
    lines = [line.strip().lower().lstrip("-* ") for line in (read(run, "shopping_list.txt") or "").splitlines() if line.strip()]
    return "" if lines[:2] == ["bread", "milk"] and "olive oil" in lines[2:] else f"shopping_list.txt lines: {lines}"


def _party_time(run: Run) -> str:
    got = read(run, "party.txt") or ""
    ok = "19:00" in got and "18:00" not in got and "bring snacks" in got.lower()
    return "" if ok else f"party.txt is {got!r}"


def _expense_row(run: Run) -> str:
    rows = [line.strip() for line in (read(run, "expenses.csv") or "").splitlines() if line.strip()]
    if rows[:3] != [line for line in EXPENSES.splitlines()]:
        return f"the old rows of expenses.csv changed: {rows}"
    days = [d.isoformat() for d in run.today()]
    new = [r for r in rows[3:] if any(d in r for d in days) and "lunch" in r.lower() and re.search(r"12\.50?\b", r)]
    return "" if new else f"no row '{days[-1]},lunch,12.50' in expenses.csv: {rows}"


def _two_facts(run: Run) -> str:
    return first_problem(_fact_with("okafor")(run), _fact_with("55812")(run))


def _spot_in_scratchpad(run: Run) -> str:
    text = section(run, "car")
    return "" if re.search(r"\b117\b", text) else f"section car is {text!r}"


GUESTS = "".join(f"{name}\n" for name in (
    "Ada", "Ben", "Cleo", "Dev", "Elif", "Femi", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Mo", "Nia", "Oli",
    "Pia", "Quin", "Raf", "Sol", "Tam", "Uma", "Vic", "Wen"))  # 23 names
TIMESHEET = "day,project,hours\nMon,alpha,7.5\nTue,alpha,8\nWed,beta,6.5\nThu,beta,9\nFri,alpha,6.5\n"  # 37.5
EXPENSES = "date,what,amount\n2026-01-05,groceries,54.20\n2026-01-06,bus ticket,2.80"
EMAIL = ("From: Maria\nSubject: Saturday\n\nHi! For the party, could you please book the venue for Saturday, "
         "order the birthday cake, and send the invitations by Wednesday? Thanks, Maria\n")

DAILY_TASKS: list[Task] = [
    Task("todo_next_friday", ["Add a todo 'dentist' for next Friday, with the date."], _dentist_friday),
    Task("csv_sum_to_file", ["Add up the hours column of timesheet.csv and write the total into hours_total.txt."],
         _number_in_file("hours_total.txt", "37.5", "37.50"), seed_files({"timesheet.csv": TIMESHEET})),
    Task("web_then_memory", ["Look up the opening hours of the Quellin library on {web}/library.html and remember them for me."],
         _library_hours),
    Task("web_price_to_file", ["Check the price of the Aurora kettle on {web}/shop.html and save it in the file kettle_price.txt."],
         lambda r: first_problem(any_ran(r, "web_view", "http_request"), _number_in_file("kettle_price.txt", "39.90", "39.9")(r)),
         approve=("filesystem",)),
    Task("unit_convert_scratchpad", ["Convert 26.2 miles to kilometres and write the result in the scratchpad section 'conversions'."],
         _conversion),
    Task("json_value_to_file", ["Read settings.json and write the value of its timeout field into timeout.txt."],
         _number_in_file("timeout.txt", "45"),
         seed_files({"settings.json": json.dumps({"name": "backup", "timeout": 45, "retries": 3}, indent=2)})),
    Task("count_lines_to_file", ["Count the lines in guests.txt and write the number into guest_count.txt."],
         _number_in_file("guest_count.txt", "23"), seed_files({"guests.txt": GUESTS})),
    Task("todo_from_email", ["Read email.txt and make a todo list of the things Maria asks me to do."], _todo_from_email,
         seed_files({"email.txt": EMAIL})),
    Task("memory_to_file", ["Write my home address, which you have in your memory, into the file address.txt."],
         _file_contains("address.txt", "12 Birch Lane"),
         lambda r: seed_fact(r, "personal", "home address", "12 Birch Lane, Tolvik")),
    Task("shopping_list_add", ["Add 'olive oil' to my shopping list in shopping_list.txt."], _shopping_appended,
         seed_files({"shopping_list.txt": "bread\nmilk\n"})),
    Task("file_edit_time", ["In party.txt, change the time from 18:00 to 19:00."], _party_time,
         seed_files({"party.txt": "Party at Mia's on Saturday at 18:00. Bring snacks.\n"})),
    Task("expense_add_row", ["Add a row to expenses.csv for today: lunch, 12.50. Use the same format as the other rows."],
         _expense_row, seed_files({"expenses.csv": EXPENSES + "\n"})),
    Task("memory_save_two", ["Remember that my dentist is Dr. Okafor and that my gym membership number is 55812."], _two_facts),
    Task("scratchpad_from_file", ["Read parking.txt and put the parking spot number into the scratchpad section 'car'."],
         _spot_in_scratchpad, seed_files({"parking.txt": "Parked on level 3, spot 117, near the lifts.\n"})),
]

LINES = "".join(f"line {i}\n" for i in range(1, 18))
SALES = "date,item,amount\n2026-01-03,pens,120\n2026-01-09,paper,340\n2026-01-15,ink,75\n2026-01-21,desk,410\n2026-01-30,lamp,99\n"

TASKS: list[Task] = [
    Task("todo_create", ["Make a todo list for me with three tasks: buy milk, call the plumber, pay rent."], _todo_create),
    Task("todo_mark_done", ["On my todo list, mark task 2 as done."], _todo_mark, _seed_todo),
    Task("todo_plan_then_mark", ["Create a todo list with two tasks, 'draft email' and 'send email', then mark the first one as done."],
         _todo_plan_then_mark),
    Task("memory_save_colour", ["Please remember that my favourite colour is teal."], _fact_with("teal")),
    Task("memory_save_birthday", ["Remember this: my sister Anna's birthday is on 14 March."], _fact_with("anna", "14", "mar")),
    Task("memory_save_editor", ["Save in your memory that I use the Helix editor for coding."], _fact_with("helix")),
    Task("memory_recall", ["What is my car's licence plate? Check your memory."],
         lambda r: answer_has(r, "kx-4471-b"), lambda r: seed_fact(r, "vehicles", "car licence plate", "KX-4471-B")),
    Task("memory_forget", ["Forget what you know about my dog's name."], _forget,
         lambda r: seed_fact(r, "pets", "dog name", "Rex")),
    Task("memory_update", ["I changed jobs: I now work at Globex, not Initech any more. Update your memory."], _update_job,
         lambda r: seed_fact(r, "work", "employer", "Initech")),
    Task("file_write", ["Create a file named shopping.txt in the workspace containing exactly this text: eggs, flour, sugar"],
         _file_equals("shopping.txt", "eggs, flour, sugar")),
    Task("file_write_nested", ["Write the text 'Meeting at 10:30 in room B' to the file notes/meeting.txt."],
         _file_contains("notes/meeting.txt", "Meeting at 10:30 in room B")),
    Task("file_write_json", ["Create a file config.json containing a JSON object with debug set to true and port set to 8080."],
         _config_json),
    Task("file_append", ["Append a new line saying 'finished' to the file log.txt."], _appended, seed_files({"log.txt": "started\n"})),
    Task("file_read", ["What is the code word written in the file secret.txt?"], lambda r: answer_has(r, "pelican"),
         seed_files({"secret.txt": "Note to self. The code word is PELICAN. Do not share it.\n"})),
    Task("file_list_count", ["How many files are in the reports folder? List it and answer with the number."],
         lambda r: first_problem(any_ran(r, "filesystem", "terminal"), answer_has(r, "3")),
         seed_files({"reports/jan.csv": "a\n", "reports/feb.csv": "b\n", "reports/mar.csv": "c\n"})),
    Task("file_mkdir", ["Create a folder called archive/2026 in the workspace."],
         lambda r: "" if r.file("archive/2026").is_dir() else "archive/2026 is not a folder"),
    Task("file_move", ["Rename the file draft.txt to final.txt."], _moved, seed_files({"draft.txt": "first draft\n"})),
    Task("file_delete", ["Delete the file tmp_notes.txt from the workspace."], _deleted,
         seed_files({"tmp_notes.txt": "scratch\n", "keep.txt": "keep me\n"})),
    Task("file_search", ["Which file in the docs folder mentions kiwi?"], lambda r: answer_has(r, "b.txt"),
         seed_files({"docs/a.txt": "apples and plums\n", "docs/b.txt": "a kiwi salad recipe\n", "docs/c.txt": "pears\n"})),
    Task("code_sum", ["Use code_exec to compute the sum of all integers from 1 to 12345, and tell me the result."],
         lambda r: first_problem(ran(r, "code_exec"), answer_has(r, "76205685"))),
    Task("code_primes", ["Write and run Python code that counts the prime numbers below 10000. What is the count?"],
         lambda r: first_problem(ran(r, "code_exec"), answer_has(r, "1229"))),
    Task("code_file", ["Run Python code that writes the squares of 1 to 5, one per line, into squares.txt in the workspace."], _squares),
    Task("csv_total", ["What is the total of the amount column in sales.csv?"], lambda r: answer_has(r, "1044"),
         seed_files({"sales.csv": SALES})),
    Task("web_fact", ["Open {web}/zorblax.html and tell me how tall the Zorblax tower is."],
         lambda r: first_problem(any_ran(r, "web_view", "http_request"), answer_has(r, "347"))),
    Task("web_capital", ["Read the page {web}/veltria.html: what is the capital of Veltria?"],
         lambda r: first_problem(any_ran(r, "web_view", "http_request"), answer_has(r, "marnhold"))),
    Task("http_get_json", ["Fetch {web}/api/stock.json and tell me how many widgets are in stock."],
         lambda r: first_problem(any_ran(r, "http_request", "web_view"), answer_has(r, "7319"))),
    Task("http_post", ['Send an HTTP POST request to {web}/api/notes with the JSON body {{"note": "hello navi"}}.'], _posted,
         approve=("http_request",)),
    Task("switch_profile", ["Switch this session to the smart_home profile."], _switched),
    Task("list_profiles", ["Which agent profiles are available? List their ids."],
         lambda r: first_problem(ran(r, "list_profiles"), answer_has(r, "secretary", "server_admin", "smart_home"))),
    Task("scratchpad_write", ["Write 'server is up' into the scratchpad section named status."],
         lambda r: "" if "server is up" in section(r, "status").lower() else f"section status is {section(r, 'status')!r}"),
    Task("scratchpad_two_notes", ["In the scratchpad section 'findings', note 'price is 20 EUR', then add 'stock is low' to the same section."],
         lambda r: "" if all(n in section(r, "findings").lower() for n in ("price is 20 eur", "stock is low"))
         else f"section findings is {section(r, 'findings')!r}"),
    Task("write_tool_then_use", ["Write a new tool called reverse_text: it takes a string parameter `text` and returns it reversed.",
                                 "Now use the reverse_text tool to reverse the word 'stressed'."], _tool_used),
    Task("write_tool", ["Create a new tool named word_count that counts the words in its `text` parameter."], _word_count_tool),
    Task("test_tool", ["Run the user tool shout with the text 'hello' using test_tool and tell me its output."],
         lambda r: first_problem(_shout_ran(r), answer_has(r, "hello!"))),
    Task("tool_manual", ["Read the manual of the web_view tool and tell me in one sentence what it does."],
         lambda r: ran(r, "tool_manual", name="web_view")),
    Task("list_tools", ["List the tools you have right now. Is there one called shout?"], lambda r: ran(r, "list_tools")),
    Task("terminal_wc", ["Use the terminal to count the lines of data/lines.txt with wc -l and tell me the number."],
         lambda r: first_problem(ran(r, "terminal"), answer_has(r, "17")), seed_files({"data/lines.txt": LINES})),
    Task("memory_and_todo", ["Remember that my cat is called Miso, and add 'buy cat food' to a new todo list."],
         lambda r: first_problem(_fact_with("miso")(r), "" if any("cat food" in i["task"].lower() for i in todo_items(r))
                                 else f"todo list is {todo_items(r)}")),
] + DAILY_TASKS

# A user tool every run finds already installed (test_tool and list_tools ask about it).
SHOUT_TOOL = '''name = "shout"
description = "Return the text in upper case with an exclamation mark."
parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


async def execute(params: dict) -> str:
    return params["text"].upper() + "!"
'''
