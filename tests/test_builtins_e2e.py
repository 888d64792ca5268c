"""Every local builtin tool, called end to end through a WebSocket run with the frames of the
seeds' protocol (the network/media tools have their own WebSocket test in test_tools_media)."""

from __future__ import annotations

import json
import shutil

import pytest
from channels.testing import WebsocketCommunicator

from agent.models import Profile
from navi_project.asgi import application
from tests.llm_server import Rule, Turn
from tools_app.workspace import workspace_for

pytestmark = pytest.mark.django_db(transaction=True)

TOOL_CODE = '''name = "shout"
description = "Upper-cases text."
parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


async def execute(params: dict) -> str:
    return params["text"].upper()
'''

CALLS = [
    ("todo", {"action": "set", "tasks": ["write", "check"]}, "1. [ ] write"),
    ("scratchpad", {"action": "write", "section": "findings", "content": "e2e note"}, "saved"),
    ("scratchpad", {"action": "read", "section": "findings"}, "e2e note"),
    ("list_profiles", {}, "server_admin"),
    ("filesystem", {"action": "write", "path": "notes/e2e.txt", "content": "hello file"}, ""),
    ("filesystem", {"action": "read", "path": "notes/e2e.txt"}, "hello file"),
    ("terminal", {"command": "echo terminal-ok"}, "terminal-ok"),
    ("write_tool", {"name": "shout", "code": TOOL_CODE}, "shout"),
    ("list_tools", {}, "shout"),
    ("tool_manual", {"name": "write_tool"}, "execute"),
    ("test_tool", {"name": "shout", "params": {"text": "quiet"}}, "QUIET"),
    ("reload_tools", {}, "shout"),
    ("delete_tool", {"name": "shout"}, "shout"),
    ("memory_save", {"category": "pets", "key": "dog", "value": "Rex"}, "Rex"),
    ("memory_search", {"query": "dog"}, "Rex"),
    ("memory_forget", {"key": "dog"}, "dog"),
]
if shutil.which("bwrap"):
    CALLS.insert(7, ("code_exec", {"code": "print(6 * 7)"}, "42"))


async def test_every_local_builtin_runs_through_a_websocket_run(llm, session, owner_token, host_tools_allowed, settings):
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    await Profile.objects.aupdate(planning_enabled=False)
    turns = [Turn(tool_calls=[{"name": name, "arguments": args}]) for name, args, _ in CALLS]
    llm.add_rule(Rule(match="use every tool", turns=turns + [Turn(content="All tools ran.")]))
    comm = WebsocketCommunicator(
        application, f"/ws/sessions/{session.id}", headers=[(b"authorization", f"Bearer {owner_token}".encode())]
    )
    assert (await comm.connect(timeout=10))[0]
    await comm.send_json_to({"type": "message", "content": "use every tool"})
    frames = []
    while not frames or frames[-1]["type"] not in ("stream_end", "error"):
        frames.append(json.loads(await comm.receive_from(timeout=60)))
    await comm.disconnect()

    assert frames[-1]["type"] == "stream_end", frames[-1]
    started = [f["tool"] for f in frames if f["type"] == "tool_started"]
    done = [f for f in frames if f["type"] == "tool_call"]
    assert started == [name for name, _, _ in CALLS]
    for (name, _, expected), frame in zip(CALLS, done):
        assert frame["tool"] == name and frame["is_subagent"] is False
        assert frame["success"], f"{name} failed: {frame['result']}"
        assert expected.lower() in frame["result"].lower(), f"{name}: {frame['result']}"
    assert (workspace_for(session.owner_id) / "notes" / "e2e.txt").read_text() == "hello file"
    memory_frames = [f for f in frames if f["type"] == "memory_saved"]
    assert memory_frames and memory_frames[0]["value"] == "Rex"
