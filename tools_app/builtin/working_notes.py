"""`todo` and `scratchpad`: per-session working state, stored in the database so it survives a
restart. Sub-agents have their own scope (their `subagent_<uuid12>` id)."""

from __future__ import annotations

from typing import Any

from tools_app import dates
from tools_app.base import Tool, ToolResult
from tools_app.context import current_session_id, current_taint, repair_on
from tools_app.models import ScratchpadSection, TodoList

MAX_ITEMS = 200  # tasks on one list (action=add stops there)
TODO_STATUSES = ["pending", "in_progress", "done", "failed", "skipped"]
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]", "failed": "[!]", "skipped": "[-]"}


def _scope() -> str:
    scope = current_session_id.get()
    if not scope:
        raise RuntimeError("no active session: todo and scratchpad only work inside a chat run")
    return scope


def _result(text: str, untrusted_source: str) -> ToolResult:
    """Notes written while the chat held untrusted content come back marked: the loop wraps
    them as data (agent.toolcalling.tool_step), so they keep the chat tainted after that content is gone."""
    return ToolResult(True, text, metadata={"untrusted_source": untrusted_source} if untrusted_source else {})


def _render_todo(items: list[dict]) -> str:
    if not items:
        return "The todo list is empty. Use action=set with a list of tasks to start one."
    lines = [f"{i}. {_MARKS.get(it['status'], '[ ]')} {it['task']} ({it['status']})" for i, it in enumerate(items, 1)]
    done = sum(1 for it in items if it["status"] in ("done", "skipped"))
    return "\n".join(lines + [f"Progress: {done}/{len(items)}"])


class TodoTool(Tool):
    name = "todo"
    keywords = "todo list task tasks checklist mark done finished plan steps"
    examples = (
        "put buy bread and pay the rent on my checklist",
        "mark the second item as done",
        "what's still open on my list of things to do?",
        "make a plan with the steps for moving house",
        "cross off calling the bank",
    )
    description = (
        "A checklist for multi-step work in this session. action=set replaces the list with "
        "`tasks`; action=add puts `tasks` at the end of the list, keeping what is on it; action=update "
        "sets the status of task number `index` (1-based); action=read shows the list. Statuses: "
        "pending, in_progress, done, failed, skipped."
    )
    actions = {"set": "tasks", "add": "tasks", "update": "index status", "read": ""}
    keeps = True

    def kept_text(self, arguments: dict[str, Any]) -> str:
        tasks = arguments.get("tasks")
        return "\n".join(str(t) for t in tasks) if isinstance(tasks, list) else ""

    # One item put on the list after another tool found it (a page's event): written from what
    # was found, as a note is (a 0.5B model put "put it on my to-do list" on the list).
    def takes_text(self, arguments: dict[str, Any]) -> bool:
        tasks = arguments.get("tasks")
        return arguments.get("action") in ("set", "add") and isinstance(tasks, list) and len(tasks) == 1

    def text_place(self, arguments: dict[str, Any]) -> str:
        return "the to-do list (one item)"

    def with_kept_text(self, arguments: dict[str, Any], text: str) -> dict[str, Any]:
        return {**arguments, "tasks": [text]}
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["set", "add", "update", "read"]},
            "tasks": {"type": "array", "items": {"type": "string"}, "description": "for set and add"},
            "index": {"type": "integer", "minimum": 1, "description": "for update: task number"},
            "status": {"type": "string", "enum": TODO_STATUSES, "description": "for update"},
        },
        "required": ["action"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        scope = _scope()
        action = params["action"]
        todo, _ = await TodoList.objects.aget_or_create(scope=scope)
        if action in ("set", "add"):
            tasks = [str(t).strip() for t in params.get("tasks") or [] if str(t).strip()]
            tasks = dates.with_dates(tasks, join=repair_on("dates"))  # a small model's item split from its date
            if not tasks:
                return ToolResult(False, error=f"action={action} needs a non-empty `tasks` list of strings")
            new = [{"task": t, "status": "pending"} for t in tasks]
            if action == "add" and todo.items:
                if len(todo.items) + len(new) > MAX_ITEMS:
                    return ToolResult(False, error=f"the list holds {len(todo.items)} tasks; at most {MAX_ITEMS}: "
                                                   "mark some done and start a new list with action=set")
                todo.items = todo.items + new
                # what the list was marked by stays; what the chat holds now marks it too
                todo.untrusted_source = todo.untrusted_source or current_taint.get()
            else:
                todo.items = new
                todo.untrusted_source = current_taint.get()  # a new list: marked by what the chat holds now
            await todo.asave()
            return _result(_render_todo(todo.items), todo.untrusted_source)
        if action == "update":
            index, status = params.get("index"), params.get("status")
            if index is None or status is None:
                return ToolResult(False, error="action=update needs `index` (1-based) and `status`")
            if not todo.items:
                return ToolResult(False, error=f"no task {index}: the todo list is empty; create it first with action=set and its `tasks`")
            if not 1 <= index <= len(todo.items):
                return ToolResult(False, error=f"no task {index}; the list has {len(todo.items)} tasks")
            todo.items[index - 1]["status"] = status
            await todo.asave()
            return _result(_render_todo(todo.items), todo.untrusted_source)
        return _result(_render_todo(todo.items), todo.untrusted_source)


class ScratchpadTool(Tool):
    name = "scratchpad"
    keywords = "scratchpad note notes section write append working"
    examples = (
        "keep a draft of the email in your notes section",
        "write the findings so far into a notes section called research",
        "append this line to the log section of your notes",
        "what's in the draft section?",
    )
    description = (
        "Named working notes for the current task (findings, logs, drafts...). action=write "
        "replaces a section, append adds to it, read shows one section (or all when `section` "
        "is omitted), clear deletes one section (or all)."
    )
    actions = {"write": "section content", "append": "section content", "read": "section?", "clear": "section?"}
    text_argument, text_actions = "content", ("write", "append")
    keeps = True

    def text_place(self, arguments: dict[str, Any]) -> str:
        return f"the scratchpad section '{arguments.get('section') or 'notes'}'"
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["write", "append", "read", "clear"]},
            "section": {"type": "string", "description": "section name, e.g. findings"},
            "content": {"type": "string", "description": "for write and append"},
        },
        "required": ["action"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        scope = _scope()
        action, section = params["action"], (params.get("section") or "").strip()
        rows = ScratchpadSection.objects.filter(scope=scope)
        if action in ("write", "append"):
            if not section:
                return ToolResult(False, error=f"action={action} needs a `section` name")
            content = params.get("content")
            if content is None:
                return ToolResult(False, error=f"action={action} needs `content`")
            row, _ = await ScratchpadSection.objects.aget_or_create(scope=scope, section=section)
            replaced = action == "write" or not row.content
            row.content = content if replaced else row.content + "\n" + content
            # Replaced: marked by what the chat holds now; appended to: a mark stays until replaced.
            row.untrusted_source = current_taint.get() if replaced else (row.untrusted_source or current_taint.get())
            await row.asave()
            return ToolResult(True, f"Section '{section}' saved ({len(row.content)} chars).")
        if action == "clear":
            target = rows.filter(section=section) if section else rows
            count, _ = await target.adelete()
            return ToolResult(True, f"Cleared {count} section(s).")
        if section:
            row = await rows.filter(section=section).afirst()
            if row is None:
                names = [r.section async for r in rows]
                return ToolResult(False, error=f"no section '{section}'. Existing sections: {', '.join(names) or 'none'}")
            return _result(row.content, row.untrusted_source)
        found = [r async for r in rows]
        parts = [f"## {r.section}\n{r.content}" for r in found]
        marked = next((r.untrusted_source for r in found if r.untrusted_source), "")
        return _result("\n\n".join(parts) or "The scratchpad is empty.", marked)
