"""image_view, share_file, content_publish and reflect — unit-level and end to end through
`run_stream` / the WebSocket with the scripted test LLM."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os

import pytest
from django.test import AsyncClient
from PIL import Image

from agent.frames.events import FilePublished, to_frame
from agent.registry import get_agent
from agent.turn.reflect import ReflectTool
from sessions_app.models import Message, SessionFile
from tests.llm_server import Turn
from tests.test_tools_web import web_server  # noqa: F401  (fixture)
from tools_app.builtin.images import MAX_SIDE, ImageViewTool
from tools_app.builtin.session_files import ContentPublishTool, ShareFileTool
from tools_app.context import current_chat_session_id, current_event_sink, current_session_id
from tools_app.workspace import workspace_for

pytestmark = pytest.mark.django_db(transaction=True)


def _png(width=40, height=30, color=(255, 0, 0), mode="RGB", fmt="PNG") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (width, height), color).save(out, format=fmt)
    return out.getvalue()


@pytest.fixture
def in_session(session):
    """Tools called directly, as if inside a run of `session`."""
    sid = str(session.id)
    t1, t2 = current_session_id.set(sid), current_chat_session_id.set(sid)
    yield session
    current_session_id.reset(t1)
    current_chat_session_id.reset(t2)


async def frames_of(session_id, text) -> list[dict]:
    return [to_frame(e) async for e in get_agent().run_stream(str(session_id), text)]


# --- image_view ----------------------------------------------------------------------------
async def test_image_view_small_png_passes_through(settings, in_session):
    data = _png()
    (settings.NAVI_WORKSPACE / "pic.png").write_bytes(data)
    result = await ImageViewTool().execute({"path_or_url": "pic.png"})
    assert result.success, result.error
    assert result.metadata["is_image"] is True
    assert base64.b64decode(result.metadata["base64"]) == data
    assert "PNG, 40x30" in result.output


async def test_image_view_large_image_downscaled(settings, in_session):
    (settings.NAVI_WORKSPACE / "big.jpg").write_bytes(_png(4000, 1000, fmt="JPEG"))
    result = await ImageViewTool().execute({"path_or_url": str(settings.NAVI_WORKSPACE / "big.jpg")})
    assert result.success, result.error
    img = Image.open(io.BytesIO(base64.b64decode(result.metadata["base64"])))
    assert max(img.size) == MAX_SIDE and img.format == "JPEG"
    assert "downscaled" in result.output


async def test_image_view_webp_with_alpha_reencoded_png(settings, in_session):
    (settings.NAVI_WORKSPACE / "a.webp").write_bytes(_png(20, 20, (0, 0, 255, 128), "RGBA", "WEBP"))
    result = await ImageViewTool().execute({"path_or_url": "a.webp"})
    assert result.success, result.error
    assert Image.open(io.BytesIO(base64.b64decode(result.metadata["base64"]))).format == "PNG"


async def test_image_view_checks_magic_not_name(settings, in_session):
    (settings.NAVI_WORKSPACE / "fake.png").write_text("<?php system($_GET['c']); ?>")
    (settings.NAVI_WORKSPACE / "real.txt").write_bytes(_png())
    bad = await ImageViewTool().execute({"path_or_url": "fake.png"})
    assert not bad.success and "not a PNG" in bad.error
    good = await ImageViewTool().execute({"path_or_url": "real.txt"})
    assert good.success


async def test_image_view_bmp_refused(settings, in_session):
    (settings.NAVI_WORKSPACE / "x.bmp").write_bytes(_png(fmt="BMP"))
    result = await ImageViewTool().execute({"path_or_url": "x.bmp"})
    assert not result.success and "BMP" in result.error


async def test_image_view_paths_outside_refused(settings, in_session, tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(_png())
    os.symlink(secret, settings.NAVI_WORKSPACE / "link.png")
    for path in (str(secret), "../secret.png", "link.png", "pic\x00.png"):
        result = await ImageViewTool().execute({"path_or_url": path})
        assert not result.success, path
    missing = await ImageViewTool().execute({"path_or_url": "nope.png"})
    assert "no such file" in missing.error


async def test_image_view_reads_session_files(settings, in_session):
    from sessions_app.services import session_files_dir

    folder = session_files_dir(in_session.id)
    folder.mkdir(parents=True)
    (folder / "upload.png").write_bytes(_png())
    result = await ImageViewTool().execute({"path_or_url": "upload.png"})
    assert result.success, result.error


async def test_image_view_url_goes_through_guard(web_server, settings, in_session):  # noqa: F811
    settings.HTTP_ALLOWED_HOSTS = []
    refused = await ImageViewTool().execute({"path_or_url": web_server.base + "/page"})
    assert not refused.success and "loopback" in refused.error
    settings.HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    not_image = await ImageViewTool().execute({"path_or_url": web_server.base + "/page"})
    assert not not_image.success and "not a PNG" in not_image.error


async def test_image_view_end_to_end_context_only(llm, settings, session, owner_token, no_planning):
    (workspace_for(session.owner_id) / "pic.png").write_bytes(_png())  # a run works in its user's workspace
    llm.script(
        Turn(tool_calls=[{"name": "image_view", "arguments": {"path_or_url": "pic.png"}}]),
        Turn(content="A red rectangle."),
    )
    frames = await frames_of(session.id, "what is in pic.png?")
    kinds = [f["type"] for f in frames]
    assert "tool_started" in kinds
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "A red rectangle."
    [call] = [f for f in frames if f["type"] == "tool_call"]
    assert call["tool"] == "image_view" and call["success"] is True
    follow_up = llm.requests[-1]["messages"]
    with_images = [m for m in follow_up if m.get("images")]
    assert len(with_images) == 1 and base64.b64decode(with_images[0]["images"][0]) == _png()
    response = await AsyncClient().get(f"/sessions/{session.id}", headers={"Authorization": f"Bearer {owner_token}"})
    assert response.status_code == 200
    shown = response.json()["messages"]
    assert not any(m.get("images") for m in shown)
    assert not any("[image from image_view]" in (m.get("content") or "") for m in shown)
    assert await Message.objects.filter(session_id=session.pk, in_display=False).acount() == 1


# --- share_file / content_publish ----------------------------------------------------------
async def test_share_file_copies_and_dedupes(settings, in_session):
    from sessions_app.services import session_files_dir

    (settings.NAVI_WORKSPACE / "report v1.txt").write_text("numbers")
    tool = ShareFileTool()
    names = []
    for _ in range(3):
        result = await tool.execute({"path": "report v1.txt"})
        assert result.success, result.error
        names.append(result.metadata["name"])
    assert names == ["report v1.txt", "report v1_1.txt", "report v1_2.txt"]
    assert result.metadata["url"] == f"/sessions/{in_session.id}/files/report%20v1_2.txt"
    rows = [r async for r in SessionFile.objects.filter(session=in_session).order_by("created_at")]
    assert [r.name for r in rows] == names and all(r.size == 7 for r in rows)
    assert (session_files_dir(in_session.id) / "report v1_1.txt").read_text() == "numbers"


async def test_share_file_refuses_outside_and_needs_session(settings, session, tmp_path):
    outside = tmp_path / "passwords.txt"
    outside.write_text("hunter2")
    assert not (await ShareFileTool().execute({"path": str(outside)})).success  # no session
    sid = str(session.id)
    current_session_id.set(sid)
    current_chat_session_id.set(sid)
    for path in (str(outside), "../passwords.txt", "/etc/passwd"):
        result = await ShareFileTool().execute({"path": path})
        assert not result.success and "outside the allowed folders" in result.error
    assert await SessionFile.objects.acount() == 0


async def test_share_file_size_limit(settings, in_session):
    settings.SESSION_FILES_MAX_SIZE_MB = 0
    (settings.NAVI_WORKSPACE / "a.bin").write_bytes(b"x" * 10)
    result = await ShareFileTool().execute({"path": "a.bin"})
    assert not result.success and "limit" in result.error


async def test_content_publish_marks_and_emits(settings, in_session):
    (settings.NAVI_WORKSPACE / "chart.png").write_bytes(_png())
    assert (await ShareFileTool().execute({"path": "chart.png"})).success
    sink: asyncio.Queue = asyncio.Queue()
    token = current_event_sink.set(sink)
    try:
        result = await ContentPublishTool().execute({"name": "chart.png"})
        missing = await ContentPublishTool().execute({"name": "nope.png"})
    finally:
        current_event_sink.reset(token)
    assert result.success
    event = sink.get_nowait()
    assert event == FilePublished(name="chart.png", url=f"/sessions/{in_session.id}/files/chart.png", mime="image/png")
    assert (await SessionFile.objects.aget(name="chart.png")).published
    assert not missing.success and "chart.png" in missing.error and "share_file" in missing.error


# --- reflect -------------------------------------------------------------------------------
async def test_reflect_reviews_recent_context(llm, session, no_planning):
    from agent.context.conversation import DBConversation
    from agent.llm.messages import ChatMessage

    conv = await DBConversation.open(str(session.id))
    await conv.add(ChatMessage(role="user", content="find the cheapest flight to Lisbon"))
    await conv.add(ChatMessage(role="assistant", content="Searching now."))
    llm.script(Turn(content="## What went well\nSearched.\n## What is missing\nDates.\n## Next steps\nAsk for dates."))
    sid = str(session.id)
    current_session_id.set(sid)
    current_chat_session_id.set(sid)
    result = await ReflectTool(get_agent()).execute({"focus": "dates"})
    assert result.success and "Ask for dates." in result.output
    request = llm.requests[-1]
    assert request["think"] is False
    assert "reviewing the work" in request["messages"][0]["content"]
    assert "cheapest flight to Lisbon" in request["messages"][1]["content"]
    assert "Focus of this review: dates" in request["messages"][1]["content"]


async def test_reflect_unavailable_in_subagent(session):
    current_chat_session_id.set(str(session.id))
    current_session_id.set("subagent_abc123def456")
    result = await ReflectTool(get_agent()).execute({})
    assert not result.success and "sub-agent" in result.error


async def test_reflect_llm_down_is_readable(session, no_planning):
    from agent.context.conversation import DBConversation
    from agent.llm.messages import ChatMessage

    conv = await DBConversation.open(str(session.id))
    await conv.add(ChatMessage(role="user", content="hello"))
    current_session_id.set(str(session.id))
    current_chat_session_id.set(str(session.id))
    result = await ReflectTool(get_agent()).execute({})  # OLLAMA_HOST points at a dead port
    assert not result.success and "review call failed" in result.error


# --- every tool of this part, end to end over the WebSocket --------------------------------
async def test_tools_end_to_end_over_websocket(llm, settings, session, owner_token, no_planning, web_server, monkeypatch, host_tools_allowed):  # noqa: F811
    import ddgs.ddgs
    from channels.testing import WebsocketCommunicator

    from navi_project.asgi import application

    monkeypatch.setattr(ddgs.ddgs.DDGS, "text", lambda self, q, **kw: [{"title": "T", "href": "https://t.example/", "body": "snip"}])
    settings.HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    (workspace_for(session.owner_id) / "pic.png").write_bytes(_png())
    calls = [
        # The POST first: once web content entered the run, requests that change things ask.
        ("http_request", {"method": "POST", "url": web_server.base + "/api", "json": {"k": "v"}}),
        ("web_search", {"query": "cats"}),
        ("web_view", {"url": web_server.base + "/page"}),
        ("image_view", {"path_or_url": "pic.png"}),
        ("share_file", {"path": "pic.png"}),
        ("content_publish", {"name": "pic.png"}),
        ("reflect", {}),
    ]
    turns = [Turn(tool_calls=[{"name": n, "arguments": a}]) for n, a in calls[:-1]]
    turns += [Turn(tool_calls=[{"name": "reflect", "arguments": {}}]), Turn(content="Review: all good."), Turn(content="Done.")]
    llm.script(*turns)
    comm = WebsocketCommunicator(
        application, f"/ws/sessions/{session.id}", headers=[(b"authorization", f"Bearer {owner_token}".encode())]
    )
    connected, _ = await comm.connect(timeout=10)
    assert connected
    # The owner names the server: after the search results (untrusted), a request to a host
    # nobody named would ask for approval (an exfiltration through a GET).
    await comm.send_json_to({"type": "message", "content": f"use every tool on {web_server.base}"})
    frames = []
    while not frames or frames[-1]["type"] not in ("stream_end", "error", "stream_stopped"):
        frames.append(await comm.receive_json_from(timeout=30))
    await comm.disconnect()
    started = [f["tool"] for f in frames if f["type"] == "tool_started"]
    results = {f["tool"]: f for f in frames if f["type"] == "tool_call"}
    assert started == [n for n, _ in calls]
    failed = {n: f["result"] for n, f in results.items() if not f["success"]}
    assert failed == {}
    assert "https://t.example/" in results["web_search"]["result"]
    assert "Cats are small carnivorous mammals" in results["web_view"]["result"]
    assert "HTTP 201" in results["http_request"]["result"]
    assert "Review: all good." in results["reflect"]["result"]
    published = [f for f in frames if f["type"] == "file_published"]
    assert published and published[0]["name"] == "pic.png" and published[0]["mime"] == "image/png"
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Done."
    assert json.loads(json.dumps(frames))  # every frame is plain JSON


async def test_share_file_of_an_existing_session_file_just_links_it(settings, in_session):
    from sessions_app.services import session_files_dir

    folder = session_files_dir(in_session.id)
    folder.mkdir(parents=True)
    (folder / "upload.csv").write_text("a,b")
    await SessionFile.objects.acreate(session=in_session, name="upload.csv", path=str(folder / "upload.csv"), size=3)
    result = await ShareFileTool().execute({"path": "upload.csv"})
    assert result.success and result.metadata["name"] == "upload.csv"
    assert await SessionFile.objects.acount() == 1
