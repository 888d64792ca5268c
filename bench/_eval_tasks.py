"""The tasks of `bench/agent_eval.py`: what the user says, what is set up first, and a checker
that reads the end state (database rows, files, what the bench's own web server received) —
never the model's account of what it did. Read-only answers (a fact from a page, a sum) are
checked in the final answer, together with the tool call that had to produce them.

A checker returns "" when the task succeeded, else a short reason.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable


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


# --- the local web pages the web tasks read ---------------------------------------------------------
PAGES = {
    "/zorblax.html": "<html><head><title>Zorblax tower</title></head><body><h1>The Zorblax tower</h1>"
    "<p>The Zorblax tower stands in the old town of Quellin. It is 347 metres tall and was finished "
    "in 1911 after nine years of work.</p></body></html>",
    "/veltria.html": "<html><body><h1>Veltria</h1><p>Veltria is a small inland country. Its capital "
    "is Marnhold, on the river Ebb. The currency is the veltrian crown.</p></body></html>",
    "/api/stock.json": json.dumps({"item": "widget", "in_stock": 7319, "warehouse": "north"}),
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
    Task("http_post", ['Send an HTTP POST request to {web}/api/notes with the JSON body {{"note": "hello navi"}}.'], _posted),
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
]

# A user tool every run finds already installed (test_tool and list_tools ask about it).
SHOUT_TOOL = '''name = "shout"
description = "Return the text in upper case with an exclamation mark."
parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


async def execute(params: dict) -> str:
    return params["text"].upper() + "!"
'''
