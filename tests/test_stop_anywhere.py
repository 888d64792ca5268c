"""Stop at every moment of a run: the planning call, a model that has not sent a byte yet, a
tool, post-turn work (compression, the title). stream_stopped arrives within 0.5 s of the stop
and the LLM request is closed (the test LLM server sees the client hang up)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from agent.models import Profile
from sessions_app.models import Message, Session
from tests.llm_server import Turn
from tests.test_consumer import TIMEOUT, connect

pytestmark = pytest.mark.django_db(transaction=True)
# What each stop interrupts holds 30 s (the model's first byte, `sleep 30`): a stop is prompt when it
# does not wait for it. A loaded machine took 0.88 s once (a 0.5 s bound failed there).
STOP_WITHIN_S = 5.0


async def _socket(session, token):
    comm = connect(session.id, token=token)
    connected, _ = await comm.connect(timeout=TIMEOUT)
    assert connected
    return comm


async def _stop_and_time(comm) -> tuple[float, list[dict]]:
    """Send stop; frames up to stream_stopped and the seconds it took."""
    started = time.monotonic()
    await comm.send_json_to({"type": "stop"})
    frames = []
    while True:
        frame = json.loads(await comm.receive_from(timeout=TIMEOUT))
        frames.append(frame)
        if frame["type"] == "stream_stopped":
            return time.monotonic() - started, frames
        assert frame["type"] != "error", frame


async def _until(comm, kind: str) -> list[dict]:
    frames = []
    while True:
        frame = json.loads(await comm.receive_from(timeout=TIMEOUT))
        frames.append(frame)
        if frame["type"] == kind:
            return frames


async def _wait_requests(llm, n: int) -> None:
    assert await asyncio.to_thread(llm.wait_for_requests, n, TIMEOUT), f"the LLM never got request #{n}"


async def _wait_disconnect(llm) -> None:
    assert await asyncio.to_thread(llm.wait_for_disconnect, TIMEOUT), "the LLM request was not closed"


async def _run_released(session) -> None:
    for _ in range(200):
        if (await Session.objects.aget(pk=session.pk)).active_run_id == "":
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the run kept its claim")


class TestStopBeforeTheAnswer:
    async def test_during_the_planning_call(self, llm, session, owner_token, profiles):
        llm.script(Turn(content="1. never", hold=30))  # the planning call: accepted, never answered
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "plan something"})
        await _wait_requests(llm, 1)
        assert "planning step" in llm.requests[0]["messages"][-1]["content"]
        elapsed, frames = await _stop_and_time(comm)
        assert elapsed < STOP_WITHIN_S, f"stream_stopped after {elapsed:.2f}s"
        await _wait_disconnect(llm)
        assert len(llm.requests) == 1  # no answer call after the stop
        await _run_released(session)
        rows = [(m.role, m.meta.get("kind")) async for m in Message.objects.filter(session=session).order_by("seq")]
        assert rows == [("user", None), ("system", "stopped")]
        await comm.disconnect()

    @pytest.mark.parametrize(
        "turn",
        [Turn(content="too late", hold=30), Turn(content="too late", first_delay=30)],
        ids=["no-headers-yet", "headers-but-no-token"],
    )
    async def test_before_the_model_sends_a_byte(self, llm, session, owner_token, no_planning, turn):
        llm.script(turn)
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "hello"})
        await _wait_requests(llm, 1)
        elapsed, frames = await _stop_and_time(comm)
        assert elapsed < STOP_WITHIN_S, f"stream_stopped after {elapsed:.2f}s"
        await _wait_disconnect(llm)
        assert not [f for f in frames if f["type"] == "stream_delta"]
        await _run_released(session)
        await comm.disconnect()

    async def test_before_the_first_byte_with_the_openai_backend(self, llm, session, owner_token, no_planning):
        await Profile.objects.aupdate(llm_backend="openai")
        llm.script(Turn(content="too late", hold=30))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "hello"})
        await _wait_requests(llm, 1)
        assert llm.requests[0]["path"] == "/v1/chat/completions"
        elapsed, _ = await _stop_and_time(comm)
        assert elapsed < STOP_WITHIN_S, f"stream_stopped after {elapsed:.2f}s"
        await _wait_disconnect(llm)
        await _run_released(session)
        await comm.disconnect()

    async def test_during_a_tool(self, llm, session, owner_token, no_planning, host_tools_allowed):
        llm.script(Turn(tool_calls=[{"name": "terminal", "arguments": {"command": "sleep 30"}}]), Turn(content="never"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "wait a bit"})
        await _until(comm, "tool_started")
        elapsed, frames = await _stop_and_time(comm)
        assert elapsed < STOP_WITHIN_S, f"stream_stopped after {elapsed:.2f}s"
        assert len(llm.requests) == 1
        await _run_released(session)
        await comm.disconnect()


class TestStopBeforeTheTurn:
    async def test_during_pre_turn_compression(self, llm, session, owner_token, no_planning, settings):
        settings.CONTEXT_KEEP_RECENT = 1
        await Session.objects.filter(pk=session.pk).aupdate(context_token_count=7000)
        for seq, (role, text) in enumerate([("user", "old question"), ("assistant", "old answer")], start=1):
            await Message.objects.acreate(session=session, seq=seq, role=role, content=text)
        llm.script(Turn(content="- summary", hold=30))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "new question"})
        await _wait_requests(llm, 1)
        assert "compress" in llm.requests[0]["messages"][0]["content"]
        elapsed, frames = await _stop_and_time(comm)
        assert elapsed < STOP_WITHIN_S, f"stream_stopped after {elapsed:.2f}s"
        assert [f["type"] for f in frames].count("stream_stopped") == 1
        await _wait_disconnect(llm)
        await _run_released(session)
        assert len(llm.requests) == 1
        await comm.disconnect()


class TestStopAfterTheAnswer:
    async def test_during_compression(self, llm, session, owner_token, no_planning, settings):
        settings.CONTEXT_KEEP_RECENT = 1
        for seq, (role, text) in enumerate([("user", "old question"), ("assistant", "old answer")], start=1):
            await Message.objects.acreate(session=session, seq=seq, role=role, content=text)
        llm.script(Turn(content="the answer", prompt_tokens=7000), Turn(content="- summary", hold=30))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "new question"})
        await _until(comm, "stream_end")
        await _wait_requests(llm, 2)
        assert "compress" in llm.requests[1]["messages"][0]["content"]
        elapsed, frames = await _stop_and_time(comm)
        assert elapsed < STOP_WITHIN_S, f"stream_stopped after {elapsed:.2f}s"
        await _wait_disconnect(llm)
        await _run_released(session)
        # The answer stands, the context is not compressed, and no "stopped" row is added.
        assert not await Message.objects.filter(session=session, is_summary=True).aexists()
        assert not await Message.objects.filter(session=session, role="system").aexists()
        assert (await Message.objects.aget(session=session, role="assistant", seq__gt=2)).status == "complete"
        await comm.disconnect()

    async def test_during_the_title_call(self, llm, session, owner_token, no_planning, settings):
        settings.CHAT_TITLES = "model"
        llm.script(Turn(content="the answer"), Turn(content="A Title", hold=30))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "name this chat"})
        await _until(comm, "stream_end")
        await _wait_requests(llm, 2)
        elapsed, _ = await _stop_and_time(comm)
        assert elapsed < STOP_WITHIN_S, f"stream_stopped after {elapsed:.2f}s"
        await _wait_disconnect(llm)
        await _run_released(session)
        refreshed = await Session.objects.aget(pk=session.pk)
        assert refreshed.title == "name this chat" and refreshed.title_source == ""  # the first words stay
        await comm.disconnect()
