"""SessionConsumer and the run manager in-process: auth, origin, bad frames, numbered frames,
replay on connect, resume, stop, and the REST endpoints that drive runs."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient

from navi_project.asgi import application
from sessions_app.models import Message, Session
from tests.llm_server import Turn, talk

pytestmark = pytest.mark.django_db(transaction=True)
TIMEOUT = 10


class TokenClient:
    """AsyncClient with a Bearer header on every request (its constructor headers do not
    reach ASGI requests)."""

    def __init__(self, token: str):
        self.client = AsyncClient()
        self.headers = {"Authorization": f"Bearer {token}"}

    async def post(self, path, data=None, content_type="application/json"):
        return await self.client.post(path, data, content_type=content_type, headers=self.headers)


def connect(session_id, token=None, origin=None, cookie=None, query="", host=None, scheme=None, extra=()):
    headers = list(extra)
    if host:
        headers.append((b"host", host.encode()))
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if origin:
        headers.append((b"origin", origin.encode()))
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    path = f"/ws/sessions/{session_id}" + (f"?{query}" if query else "")
    comm = WebsocketCommunicator(application, path, headers=headers)
    if scheme:
        comm.scope["scheme"] = scheme
    return comm


async def send_message(session, token: str, content: str) -> WebsocketCommunicator:
    """A connected socket on which `content` was just sent as a message."""
    comm = connect(session.id, token=token)
    connected, _ = await comm.connect(timeout=TIMEOUT)
    assert connected
    await comm.send_json_to({"type": "message", "content": content})
    return comm


async def receive_until(comm, last_type="stream_end", timeout=TIMEOUT) -> list[dict]:
    frames = []
    while True:
        frame = json.loads(await comm.receive_from(timeout=timeout))
        frames.append(frame)
        if frame["type"] in (last_type, "error", "stream_stopped") and frame.get("run_id"):
            return frames


async def closed_with(comm) -> int:
    connected, _ = await comm.connect(timeout=TIMEOUT)
    assert connected  # accepted first, so the close code reaches the client
    output = await comm.receive_output(timeout=TIMEOUT)
    assert output["type"] == "websocket.close"
    return output["code"]


class TestHandshake:
    async def test_anonymous_is_closed_with_4401(self, session):
        assert await closed_with(connect(session.id, origin="http://testserver", host="testserver")) == 4401

    async def test_a_foreign_origin_is_closed_with_4403(self, session, owner_token):
        code = await closed_with(connect(session.id, token=owner_token, origin="http://evil.example", host="127.0.0.1:8000"))
        assert code == 4403

    async def test_a_missing_origin_needs_a_token(self, session, owner, client):
        await sync_to_async(client.force_login)(owner)
        cookie = f"sessionid={client.cookies['sessionid'].value}"
        assert await closed_with(connect(session.id, cookie=cookie)) == 4403

    async def test_a_cookie_session_with_the_right_origin_connects(self, session, owner, client):
        await sync_to_async(client.force_login)(owner)
        cookie = f"sessionid={client.cookies['sessionid'].value}"
        comm = connect(session.id, cookie=cookie, origin="http://localhost:8000", host="localhost:8000")
        connected, _ = await comm.connect(timeout=TIMEOUT)
        assert connected
        await comm.send_json_to({"type": "ping"})
        assert await comm.receive_json_from(timeout=TIMEOUT) == {"type": "pong"}
        await comm.disconnect()

    async def _cookie(self, client, owner) -> str:
        await sync_to_async(client.force_login)(owner)
        return f"sessionid={client.cookies['sessionid'].value}"

    async def test_it_refuses_a_cookie_socket_from_another_port_of_the_same_host(self, session, owner, client):
        cookie = await self._cookie(client, owner)
        comm = connect(session.id, cookie=cookie, origin="http://127.0.0.1:9999", host="127.0.0.1:8000")
        assert await closed_with(comm) == 4403

    async def test_it_refuses_a_token_socket_with_a_wrong_origin(self, session, owner_token):
        for origin in ("http://127.0.0.1:9999", "https://127.0.0.1:8000", "http://evil.example:8000"):
            comm = connect(session.id, token=owner_token, origin=origin, host="127.0.0.1:8000")
            assert await closed_with(comm) == 4403, origin

    async def test_it_refuses_the_scheme_the_socket_did_not_use(self, session, owner, client):
        cookie = await self._cookie(client, owner)
        comm = connect(session.id, cookie=cookie, origin="https://localhost", host="localhost")
        assert await closed_with(comm) == 4403
        comm = connect(session.id, cookie=cookie, origin="https://localhost", host="localhost", scheme="wss")
        assert (await comm.connect(timeout=TIMEOUT))[0]
        await comm.disconnect()

    async def test_it_takes_https_from_the_proxy_header_when_configured(self, session, owner, client, settings):
        cookie = await self._cookie(client, owner)
        proto = [(b"x-forwarded-proto", b"https")]
        assert await closed_with(connect(session.id, cookie=cookie, origin="https://localhost", host="localhost", extra=proto)) == 4403
        settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
        comm = connect(session.id, cookie=cookie, origin="https://localhost", host="localhost", extra=proto)
        assert (await comm.connect(timeout=TIMEOUT))[0]
        await comm.disconnect()

    async def test_it_refuses_a_host_outside_allowed_hosts_even_if_origin_matches(self, session, owner, client):
        cookie = await self._cookie(client, owner)
        comm = connect(session.id, cookie=cookie, origin="http://evil.example", host="evil.example")
        assert await closed_with(comm) == 4403

    @pytest.mark.parametrize("origin,accepted", [
        ("https://navi.example.org", True), ("https://navi.example.org:443", True),
        ("https://navi.example.org:8443", False), ("http://navi.example.org", False),
        ("https://a.lan.example", True), ("https://lan.example", True), ("http://a.lan.example", False),
        ("null", False),
    ])
    async def test_csrf_trusted_origins_are_accepted_as_full_origins(self, session, owner, client, settings, origin, accepted):
        settings.CSRF_TRUSTED_ORIGINS = ["https://navi.example.org", "https://*.lan.example"]
        cookie = await self._cookie(client, owner)
        comm = connect(session.id, cookie=cookie, origin=origin, host="127.0.0.1:8000")
        if accepted:
            assert (await comm.connect(timeout=TIMEOUT))[0]
            await comm.send_json_to({"type": "ping"})
            assert await comm.receive_json_from(timeout=TIMEOUT) == {"type": "pong"}
            await comm.disconnect()
        else:
            assert await closed_with(comm) == 4403

    async def test_a_bearer_header_decides_alone_whatever_cookie_comes_with_it(self, session, owner, other_user, client):
        from sessions_app.models import ApiToken

        cookie = await self._cookie(client, owner)  # the session's owner, by cookie
        _, other_token = await asyncio.to_thread(ApiToken.issue, other_user)
        # Another user's token: that user (who does not own the session), not the cookie's.
        assert await closed_with(connect(session.id, token=other_token, cookie=cookie)) == 4004
        # A token that is no token: anonymous, the owner's cookie notwithstanding.
        comm = connect(session.id, token="not-a-real-token", cookie=cookie, origin="http://localhost:8000", host="localhost:8000")
        assert await closed_with(comm) == 4401

    async def test_a_token_socket_costs_two_thread_hops_to_open_and_none_to_close(self, session, owner_token, monkeypatch):
        import asgiref.sync

        from agent.web import consumers

        monkeypatch.setattr(consumers, "_persistent_sqlite", lambda: True)  # as `make run` serves

        hops = []
        real = asgiref.sync.SyncToAsync.__call__

        async def counted(self, *args, **kwargs):
            hops.append(getattr(self.func, "__name__", repr(self.func)))
            return await real(self, *args, **kwargs)

        monkeypatch.setattr(asgiref.sync.SyncToAsync, "__call__", counted)
        from sessions_app import auth

        real_hop = auth.db_hop

        async def counted_hop(func, *args, **kwargs):  # the hot path's own hop (navi_project.hop)
            hops.append(func.__name__)
            return await real_hop(func, *args, **kwargs)

        monkeypatch.setattr(auth, "db_hop", counted_hop)
        monkeypatch.setattr(consumers, "db_hop", counted_hop)
        comm = connect(session.id, token=owner_token)
        assert (await comm.connect(timeout=TIMEOUT))[0]
        await comm.send_json_to({"type": "ping"})
        assert await comm.receive_json_from(timeout=TIMEOUT) == {"type": "pong"}
        await comm.disconnect()
        assert hops == ["user_for_token", "_owned_session_now"]  # the token; the session and its live run

    async def test_unknown_and_foreign_sessions_are_closed_with_4004(self, session, other_user):
        from sessions_app.models import ApiToken

        _, other_token = await asyncio.to_thread(ApiToken.issue, other_user)
        assert await closed_with(connect(uuid.uuid4(), token=other_token)) == 4004
        assert await closed_with(connect("not-a-uuid", token=other_token)) == 4004
        assert await closed_with(connect(session.id, token=other_token)) == 4004


class TestFrames:
    @pytest.mark.parametrize(
        "raw,expected",
        [
            ("not json", "not valid JSON"),
            ("[1, 2]", "JSON object"),
            ('{"type": "dance"}', "unknown frame type"),
            ('{"type": "message"}', "non-empty"),
            ('{"type": "message", "content": "   "}', "non-empty"),
            ('{"type": "message", "content": "x", "images": ["%%%not-base64"]}', "not valid base64"),
            ('{"type": "message", "content": "x", "images": "abc"}', "images must be a list"),
            ('{"type": "message", "content": "x", "files": [{"name": "nope.pdf", "path": "/etc/passwd"}]}', "not uploaded"),
            ('{"type": "resume", "run_id": 5}', "resume needs"),
        ],
    )
    async def test_bad_frames_get_an_error_and_the_socket_stays_open(self, session, owner_token, raw, expected):
        comm = connect(session.id, token=owner_token)
        assert (await comm.connect(timeout=TIMEOUT))[0]
        await comm.send_to(text_data=raw)
        frame = await comm.receive_json_from(timeout=TIMEOUT)
        assert frame["type"] == "error" and expected in frame["message"]
        await comm.send_json_to({"type": "ping"})
        assert await comm.receive_json_from(timeout=TIMEOUT) == {"type": "pong"}
        await comm.disconnect()
        assert await Message.objects.acount() == 0

    async def test_content_over_the_limit_is_refused(self, session, owner_token):
        comm = connect(session.id, token=owner_token)
        await comm.connect(timeout=TIMEOUT)
        await comm.send_json_to({"type": "message", "content": "x" * 100_001})
        frame = await comm.receive_json_from(timeout=TIMEOUT)
        assert frame["type"] == "error" and "100000" in frame["message"]
        await comm.disconnect()

    async def test_a_run_streams_numbered_frames(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="Hello there, owner.", chunk_size=3))
        comm = connect(session.id, token=owner_token)
        await comm.connect(timeout=TIMEOUT)
        await comm.send_json_to({"type": "message", "content": "hi", "images": ["data:image/png;base64,aGVsbG8="]})
        frames = await receive_until(comm)
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
        assert len({f["run_id"] for f in frames}) == 1
        assert frames[0]["type"] == "stream_start" and frames[-1]["type"] == "stream_end"
        assert frames[0]["user_message"] == "hi"  # other tabs can show what started the run
        assert "".join(f["delta"] for f in frames if f["type"] == "stream_delta") == "Hello there, owner."
        assert llm.requests[-1]["messages"][-1]["images"] == ["aGVsbG8="]
        await comm.disconnect()

    async def test_a_second_message_during_a_run_is_refused_and_nothing_is_lost(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="slow " * 30, chunk_size=5, delay=0.03))
        comm = await send_message(session, owner_token, "first")
        first = json.loads(await comm.receive_from(timeout=TIMEOUT))
        await comm.send_json_to({"type": "message", "content": "second"})
        frames = [first] + await receive_until(comm)
        errors = [f for f in frames if f["type"] == "error"]
        assert errors == [{"type": "error", "message": errors[0]["message"]}]
        assert "a run is already active" in errors[0]["message"]
        assert frames[-1]["type"] == "stream_end"
        contents = [m async for m in Message.objects.filter(session_id=session.pk).values_list("content", flat=True)]
        assert contents == ["first", "slow " * 30]
        await comm.disconnect()


    async def test_a_turn_start_that_fails_under_the_claim_ends_the_run_with_an_error(
        self, llm, session, owner_token, no_planning, monkeypatch
    ):
        # The claim and the turn's start share one thread hop; what fails there is reported by
        # the run (error frame) and the claim is released, so the next message runs.
        from agent.registry import get_agent

        agent = get_agent()
        original = agent.begin_turn
        calls = []

        def failing(*args, **kwargs):
            calls.append(args)
            if len(calls) == 1:
                raise RuntimeError("the summary table is gone")
            return original(*args, **kwargs)

        monkeypatch.setattr(agent, "begin_turn", failing)
        llm.script(Turn(content="Back again."))
        comm = await send_message(session, owner_token, "first")
        frames = await receive_until(comm, last_type="error")
        assert frames[-1]["type"] == "error" and "the summary table is gone" in frames[-1]["message"]
        await comm.send_json_to({"type": "message", "content": "second"})
        frames = await receive_until(comm)
        assert frames[-1]["content"] == "Back again." and len(calls) == 2
        await comm.disconnect()


class TestReconnect:
    async def test_a_socket_joining_mid_run_gets_every_frame_exactly_once(self, llm, session, owner_token, no_planning):
        text = "".join(f"w{i} " for i in range(60))
        llm.script(Turn(content=text, chunk_size=3, delay=0.01))
        first = await send_message(session, owner_token, "go")
        for _ in range(10):
            await first.receive_from(timeout=TIMEOUT)
        late = connect(session.id, token=owner_token)
        await late.connect(timeout=TIMEOUT)
        frames = await receive_until(late)
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
        assert "".join(f["delta"] for f in frames if f["type"] == "stream_delta") == text
        await receive_until(first)
        await first.disconnect()
        await late.disconnect()

    async def test_resume_after_a_sequence_number(self, llm, session, owner_token, no_planning):
        text = "".join(f"t{i} " for i in range(50))
        llm.script(Turn(content=text, chunk_size=2, delay=0.01))
        comm = await send_message(session, owner_token, "go")
        got = [json.loads(await comm.receive_from(timeout=TIMEOUT)) for _ in range(8)]
        await comm.disconnect()
        run_id, after = got[-1]["run_id"], got[-1]["seq"]
        again = connect(session.id, token=owner_token, query=f"run_id={run_id}&after_seq={after}")
        await again.connect(timeout=TIMEOUT)
        rest = await receive_until(again)
        frames = got + rest
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
        assert "".join(f["delta"] for f in frames if f["type"] == "stream_delta") == text
        await again.disconnect()

    async def test_closing_the_socket_does_not_stop_the_run(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="a" * 60, chunk_size=2, delay=0.01))
        comm = await send_message(session, owner_token, "go")
        await comm.receive_from(timeout=TIMEOUT)
        await comm.disconnect()
        for _ in range(200):
            row = await Message.objects.filter(session_id=session.pk, role="assistant").afirst()
            if row and row.status == "complete":
                break
            await asyncio.sleep(0.05)
        assert row.content == "a" * 60 and row.status == "complete"


class TestStopAndRest:
    async def test_stop_frame(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content=talk(300), chunk_size=5, delay=0.02))
        comm = await send_message(session, owner_token, "talk")
        await comm.receive_from(timeout=TIMEOUT)
        await comm.receive_from(timeout=TIMEOUT)
        await comm.send_json_to({"type": "stop"})
        frames = await receive_until(comm, last_type="stream_stopped")
        assert frames[-1]["type"] == "stream_stopped"
        assert llm.wait_for_disconnect(timeout=5)
        row = await Message.objects.aget(session_id=session.pk, role="assistant")
        assert row.status == "interrupted" and row.content
        await comm.disconnect()

    async def test_post_stop(self, llm, session, owner, owner_token, no_planning):
        llm.script(Turn(content=talk(300), chunk_size=5, delay=0.02))
        http = TokenClient(owner_token)
        assert (await http.post(f"/sessions/{session.id}/stop")).json() == {"ok": False, "reason": "no active run"}
        comm = await send_message(session, owner_token, "talk")
        await comm.receive_from(timeout=TIMEOUT)
        response = await http.post(f"/sessions/{session.id}/stop")
        assert response.status_code == 200 and response.json() == {"ok": True}
        frames = await receive_until(comm, last_type="stream_stopped")
        assert frames[-1]["type"] == "stream_stopped"
        await comm.disconnect()

    async def test_post_messages_returns_the_answer(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="REST answer.", prompt_tokens=100, eval_tokens=3))
        http = TokenClient(owner_token)
        response = await http.post(f"/sessions/{session.id}/messages", {"content": "hi"}, content_type="application/json")
        assert response.status_code == 200
        assert response.json()["content"] == "REST answer." and response.json()["context_tokens"] == 103

    async def test_post_messages_is_409_during_a_run(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="slow " * 40, chunk_size=5, delay=0.03))
        comm = await send_message(session, owner_token, "first")
        await comm.receive_from(timeout=TIMEOUT)
        http = TokenClient(owner_token)
        response = await http.post(f"/sessions/{session.id}/messages", {"content": "hi"}, content_type="application/json")
        assert response.status_code == 409 and "already active" in response.json()["error"]
        await receive_until(comm)
        await comm.disconnect()

    async def test_post_messages_is_503_when_the_llm_is_unreachable(self, session, owner_token, no_planning):
        http = TokenClient(owner_token)
        response = await http.post(f"/sessions/{session.id}/messages", {"content": "hi"}, content_type="application/json")
        assert response.status_code == 503
        assert "ollama serve" in response.json()["error"]
        assert await Message.objects.filter(session_id=session.pk, role="user").acount() == 1
        assert (await Session.objects.aget(pk=session.pk)).active_run_id == ""

    @pytest.mark.parametrize("body,status", [("{bad", 400), ('{"content": ""}', 400), ("[]", 400)])
    async def test_post_messages_rejects_bad_bodies(self, session, owner_token, body, status):
        http = TokenClient(owner_token)
        response = await http.post(f"/sessions/{session.id}/messages", body, content_type="application/json")
        assert response.status_code == status and "error" in response.json()


class TestAfterTheAnswer:
    async def test_a_message_sent_right_after_stream_end_waits_for_post_turn_work(
        self, llm, session, owner_token, no_planning, monkeypatch
    ):
        from agent.turn import workers

        finished = []

        class SlowWorker(workers.Worker):
            name = "slow"

            async def run(self, ctx):
                await asyncio.sleep(0.5)
                finished.append(True)
                return workers.WorkerResult()

        monkeypatch.setattr(workers, "post_turn_workers", [SlowWorker()])
        llm.script(Turn(content="first answer"), Turn(content="second answer"))
        comm = await send_message(session, owner_token, "one")
        await receive_until(comm)
        await comm.send_json_to({"type": "message", "content": "two"})  # the worker is still busy
        frames = await receive_until(comm)
        assert finished and frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "second answer"
        await comm.disconnect()


class TestGapRepair:
    async def test_a_frame_lost_by_the_channel_layer_is_fetched_from_the_run_buffer(
        self, llm, session, owner_token, no_planning, monkeypatch
    ):
        from agent.runs.manager import RunManager

        original = RunManager.publish

        async def lossy_publish(self, run, frame):
            if run.seq + 1 == 3:  # number it and keep it in the buffer, but never send it
                run.seq += 1
                frame.update(run_id=run.run_id, seq=run.seq)
                run.frames.append(frame)
                return
            await original(self, run, frame)

        monkeypatch.setattr(RunManager, "publish", lossy_publish)
        llm.script(Turn(content="abcdefghij" * 3, chunk_size=2, delay=0.01))
        comm = await send_message(session, owner_token, "go")
        frames = await receive_until(comm)
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
        assert "".join(f["delta"] for f in frames if f["type"] == "stream_delta") == "abcdefghij" * 3
        await comm.disconnect()


class TestSlowReplay:
    """A replay request the run's owner does not answer in time (a busy worker): asked again
    while the run is alive, answered late without loss; `resume_unavailable` only once the run
    is gone — at once when no process listens for the chat's runs at all (an owner that lost
    its group to a Redis restart held the live frames for the whole run)."""

    async def test_a_live_runs_replay_is_asked_again_until_its_owner_answers(self, session, owner_token):
        from channels.layers import get_channel_layer
        from django.utils import timezone

        from agent.frames.groups import control_group

        layer = get_channel_layer()
        owner = await layer.new_channel()  # stands in for the run's (slow) owner
        await layer.group_add(control_group(session.id), owner)
        run_id = uuid.uuid4().hex
        await Session.objects.filter(pk=session.pk).aupdate(active_run_id=run_id, active_run_heartbeat=timezone.now())
        comm = connect(session.id, token=owner_token, query=f"run_id={run_id}&after_seq=2")
        connected, _ = await comm.connect(timeout=TIMEOUT)
        assert connected
        requests = []
        for _ in range(4):  # REPLAY_ATTEMPTS, then on and on while the run is alive
            requests.append(await asyncio.wait_for(layer.receive(owner), TIMEOUT))
        assert {(r["run_id"], r["after_seq"]) for r in requests} == {(run_id, 2)}
        frame = {"type": "stream_delta", "delta": "late", "run_id": run_id, "seq": 3}
        await layer.send(requests[-1]["reply_to"], {"type": "run.replay", "run_id": run_id, "frames": [frame], "finished": False})
        assert json.loads(await comm.receive_from(timeout=TIMEOUT)) == frame
        await comm.disconnect()

    async def test_a_replay_nobody_can_serve_is_announced_at_once_and_live_frames_flow(self, session, owner_token):
        """The chat's run is live (its claim is fresh) but no process is in its control group."""
        from channels.layers import get_channel_layer
        from django.utils import timezone

        from agent.frames.groups import frames_group
        from agent.web.consumers import REPLAY_TIMEOUT_S

        run_id = uuid.uuid4().hex
        await Session.objects.filter(pk=session.pk).aupdate(active_run_id=run_id, active_run_heartbeat=timezone.now())
        comm = connect(session.id, token=owner_token, query=f"run_id={run_id}&after_seq=2")
        connected, _ = await comm.connect(timeout=TIMEOUT)
        assert connected
        started = time.monotonic()
        assert json.loads(await comm.receive_from(timeout=TIMEOUT)) == {"type": "resume_unavailable", "run_id": run_id}
        assert time.monotonic() - started < REPLAY_TIMEOUT_S  # not after a timeout: at once
        live = {"type": "stream_delta", "delta": "live", "run_id": run_id, "seq": 9}
        await get_channel_layer().group_send(frames_group(session.id), {"type": "run.event", "frame": live})
        assert json.loads(await comm.receive_from(timeout=TIMEOUT)) == live  # not held
        await comm.disconnect()

    async def test_a_gone_run_is_announced_after_the_attempts(self, session, owner_token):
        from agent.web.consumers import REPLAY_ATTEMPTS

        comm = connect(session.id, token=owner_token, query=f"run_id={uuid.uuid4().hex}&after_seq=2")
        connected, _ = await comm.connect(timeout=TIMEOUT)
        assert connected
        frame = json.loads(await comm.receive_from(timeout=TIMEOUT * REPLAY_ATTEMPTS))
        assert frame["type"] == "resume_unavailable"
        await comm.disconnect()


class TestTwoDeliverers:
    async def test_a_live_frame_waits_for_a_replay_that_is_still_being_written(self):
        """With the single-process layer a run's frames arrive in the run's own task while a
        replay is written by the socket's task: a live frame must queue behind the replay, not
        slip between its frames (which would look like a gap and stall the stream)."""
        from agent.web.consumers import SessionConsumer
        from navi_project.inmemory_layer import NaviInMemoryChannelLayer

        consumer = SessionConsumer()
        consumer.channel_layer = NaviInMemoryChannelLayer()
        consumer.channel_name = await consumer.channel_layer.new_channel()
        consumer.session_id, consumer.write_text = str(uuid.uuid4()), None
        consumer.cursor, consumer.pending, consumer.awaiting = {}, [], "token"
        consumer.relaying = asyncio.Lock()
        written, slow = [], asyncio.Event()

        async def send(text_data=None, **_):
            written.append(json.loads(text_data)["seq"])
            if len(written) == 1:
                await slow.wait()  # a slow socket write in the middle of the replay

        consumer.send = send
        frames = [{"type": "stream_delta", "delta": str(i), "run_id": "r", "seq": i} for i in (1, 2, 3)]
        replay = asyncio.create_task(consumer.run_replay({"frames": frames[:2]}))
        await asyncio.sleep(0.05)
        live = asyncio.create_task(consumer.run_event({"frame": frames[2]}))
        await asyncio.sleep(0.05)
        assert written == [1]  # the live frame waits
        slow.set()
        await asyncio.wait_for(asyncio.gather(replay, live), 10)
        assert written == [1, 2, 3] and consumer.pending == [] and consumer.awaiting is None
