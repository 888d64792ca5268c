"""The reference MCP server `@modelcontextprotocol/server-everything` (npm, nobody here wrote it)
over stdio with the Node that builds the page's libraries, inside the stdio sandbox: its tools
are listed, one is called through a scripted run with an approval, and its image and embedded
resource results become a session file card and readable text."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from sessions_app.models import SessionFile
from tests.conftest import NO_SANDBOX, sandbox_works
from tests.llm_server import Rule, Turn
from tests.mcp_support import wait_state
from tests.test_approvals import frames_until, of_type, offered, run_ended, start
from tools_app.models import MCPServer

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(NODE is None, reason="needs Node.js (the one `npm ci` uses for the page's libraries)"),
    pytest.mark.skipif(not EVERYTHING.exists(),
                       reason="node_modules lacks @modelcontextprotocol/server-everything: run `npm ci`"),
    pytest.mark.skipif(not sandbox_works(), reason=NO_SANDBOX),
]
TIMEOUT = 40


@pytest.fixture(autouse=True)
def _setup(mcp_hub, no_planning, settings):
    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.MCP_CONNECT_TIMEOUT_S = 30
    settings.TOOL_TIMEOUT_S = 30


@pytest.fixture
def everything(owner):
    # Global, as the owner adds it in the admin; only node_modules is visible to it.
    return MCPServer.objects.create(owner=None, name="everything", transport="stdio", command=NODE,
                                    args=[str(EVERYTHING), "stdio"], paths=[str(NODE_MODULES)])


async def test_its_tools_are_listed_and_one_is_called_after_an_approval(llm, session, owner_token, everything):
    llm.add_rule(Rule(match="add 2 and 3", turns=[
        Turn(tool_calls=[{"name": "everything__get-sum", "arguments": {"a": 2, "b": 3}}]),
        Turn(content="The sum is 5."),
    ]))
    comm = await start(session, owner_token, "add 2 and 3 with the everything server")
    required = (await frames_until(comm, of_type("approval_required"), TIMEOUT))[-1]
    assert required["tool"] == "everything__get-sum"
    assert {"everything__echo", "everything__get-sum", "everything__get-tiny-image"} <= offered(llm.requests[0])
    await comm.send_json_to({"type": "approval", "approval_id": required["approval_id"], "decision": "approve"})
    rest = await frames_until(comm, run_ended, TIMEOUT)
    call = [f for f in rest if f["type"] == "tool_call"][0]
    assert call["success"] and "5" in call["result"] and "UNTRUSTED DATA" in call["result"]
    assert rest[-1]["type"] == "stream_end" and rest[-1]["content"] == "The sum is 5."
    await comm.disconnect()
    server = await sync_to_async(wait_state)(everything)
    assert server.state == "connected"


async def test_an_image_and_an_embedded_resource_are_converted(llm, session, owner_token, everything):
    everything.auto_approve = True
    await everything.asave()
    llm.add_rule(Rule(match="show the tiny image", turns=[
        Turn(tool_calls=[{"name": "everything__get-tiny-image", "arguments": {}}]),
        Turn(tool_calls=[{"name": "everything__get-resource-reference", "arguments": {"resourceType": "Text",
                                                                                       "resourceId": 1}}]),
        Turn(content="Shown."),
    ]))
    comm = await start(session, owner_token, "show the tiny image")
    frames = await frames_until(comm, run_ended, TIMEOUT)
    published = [f for f in frames if f["type"] == "file_published"]
    assert published and published[0]["mime"] == "image/png"
    assert await SessionFile.objects.filter(session=session, name=published[0]["name"], published=True).aexists()
    image_call, resource_call = [f for f in frames if f["type"] == "tool_call"]
    assert image_call["success"] and "session file" in image_call["result"]
    assert resource_call["success"] and "[resource " in resource_call["result"], resource_call["result"]
    assert frames[-1]["content"] == "Shown."
    await comm.disconnect()


async def test_a_long_operation_shows_its_progress_on_the_card(llm, session, owner_token, everything):
    """Navi asks for progress (a progressToken): the server's notifications become tool_progress
    frames, at most four a second, the last one saying it is done."""
    everything.auto_approve = True
    await everything.asave()
    llm.add_rule(Rule(match="run the long operation", turns=[
        Turn(tool_calls=[{"name": "everything__trigger-long-running-operation", "arguments": {"duration": 2, "steps": 4}}]),
        Turn(content="Done."),
    ]))
    comm = await start(session, owner_token, "run the long operation")
    frames = await frames_until(comm, run_ended, TIMEOUT)
    progress = [f for f in frames if f["type"] == "tool_progress"]
    assert progress, [f["type"] for f in frames]
    assert {f["tool"] for f in progress} == {"everything__trigger-long-running-operation"}
    assert [f["progress"] for f in progress] == sorted(f["progress"] for f in progress)
    assert progress[-1]["progress"] == progress[-1]["total"] == 4
    kinds = [f["type"] for f in frames]
    assert kinds.index("tool_started") < kinds.index("tool_progress") < kinds.index("tool_call")
    assert all("run_id" in f and "seq" in f for f in progress)  # frames of the run: replayed on reconnect
    assert frames[-1]["content"] == "Done."
    await comm.disconnect()


def test_a_prompt_shows_its_description_and_its_embedded_resource(owner_client, everything):
    response = owner_client.post(f"/mcp/servers/{everything.pk}/prompt",
                                 {"name": "resource-prompt", "arguments": {"resourceType": "Text", "resourceId": "1"}},
                                 content_type="application/json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["description"] == "A prompt that includes an embedded resource reference"  # as listed
    assert body["untrusted"] is True
    texts = [m["text"] for m in body["messages"]]
    assert len(texts) == 2 and "content not shown" not in texts[1]
    assert texts[1].startswith("[resource demo://resource/static/document/") or texts[1].startswith("[resource "), texts[1]
    assert len(texts[1].splitlines()) > 1  # the resource's own text follows its URI
