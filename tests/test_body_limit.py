"""Request bodies are limited before they are read: against a real server process
(`python -m navi_project.serve`, daphne with protocol-level limits) and, for other ASGI servers,
the ASGI guard in front of Django. Also the WebSocket Origin check and the login throttle
across two real server processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import httpx
import pytest
import websockets

from tests.http_flood import RssSampler, multipart_chunks, post, rss_bytes
from tests.live_server import LiveNavi

MB = 1024 * 1024
ATTACK = 300 * MB


@pytest.fixture(scope="module")
def navi():
    with LiveNavi(env={"SESSION_FILES_MAX_SIZE_MB": "60"}) as server:
        yield server


@pytest.fixture(scope="module")
def session_id(navi):
    return navi.create_session()


class HealthPoller(threading.Thread):
    """Polls /health while an attack runs: (start time, seconds, status) per call."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.calls = url, []
        self._stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop_event.is_set():
                start = time.monotonic()
                status = client.get(f"{self.url}/health").status_code
                self.calls.append((start, time.monotonic() - start, status))

    def stop(self) -> list[tuple[float, float, int]]:
        self._stop_event.set()
        self.join()
        return self.calls


def _attack(navi: LiveNavi, path: str, headers=None, **kwargs):
    """Run a streamed 300 MB POST; return its result, the server's RSS growth and the /health
    calls that started while it ran."""
    baseline = rss_bytes(navi.proc.pid)
    sampler, poller = RssSampler(navi.proc.pid), HealthPoller(navi.url)
    sampler.start()
    poller.start()
    begin = time.monotonic()
    result = post(navi.port, path, ATTACK, headers, **kwargs)
    end = time.monotonic()
    growth = sampler.stop() - baseline
    during = [call for call in poller.stop() if begin <= call[0] <= end]
    return result, growth, during


class TestAgainstTheServer:
    def test_an_anonymous_300_mb_upload_is_refused_before_it_is_read(self, navi, session_id):
        result = post(navi.port, f"/sessions/{session_id}/files", ATTACK)
        assert result.status == 413
        assert result.sent < 8 * MB  # answered while the client was still near the start

    def test_an_anonymous_body_over_the_small_cap_is_refused_with_413_at_once(self, navi, session_id):
        result = post(navi.port, "/sessions", 10 * MB)  # under the 30 MB a signed-in client may send
        assert result.status == 413 and "without credentials" in _error(result) and "log in" in _error(result)
        assert result.sent < 8 * MB

    def test_a_deaf_anonymous_300_mb_stream_costs_no_memory(self, navi, session_id):
        result, growth, _ = _attack(navi, f"/sessions/{session_id}/files", chunked=True, stop_on_answer=False)
        assert result.status == 413
        assert result.sent < ATTACK  # the server hung up instead of reading it all
        assert growth < 50 * MB, f"server RSS grew by {growth / MB:.0f} MB"

    def test_health_keeps_answering_while_an_attack_connection_is_open(self, navi, session_id):
        # A deaf client at 4 MB/s: refused at once, then the connection lingers about 2 s.
        result, growth, during = _attack(navi, f"/sessions/{session_id}/files", chunked=True, stop_on_answer=False, rate=4 * MB)
        assert result.status == 413 and growth < 50 * MB
        assert during and all(status == 200 for _, _, status in during)

    def test_a_bad_token_is_refused_before_the_body(self, navi, session_id):
        result = post(navi.port, "/sessions", 10 * MB, {"Authorization": "Bearer nope"})
        assert result.status == 401 and result.sent < 8 * MB
        assert "invalid API token" in _error(result) and "navi_token" in _error(result)

    def test_a_bad_token_on_a_get_says_the_token_is_invalid(self, navi, session_id):
        response = httpx.get(f"{navi.url}/sessions/{session_id}", headers={"Authorization": "Bearer nope"}, timeout=30)
        assert response.status_code == 401
        error = response.json()["error"]
        assert "invalid API token" in error and "navi_token" in error and "/settings" in error
        assert "body" not in error

    def test_a_chunked_signed_in_body_reaches_django_whole(self, navi):
        # Over 100 kB without a length: Twisted spools it to a file, handed to Django as it is.
        export = {"format": "navi.session", "version": 1, "session": {"title": "chunked"},
                  "messages": [{"seq": i, "role": "user", "content": f"m{i} " + "x" * 100} for i in range(1, 3001)]}
        data = json.dumps(export).encode()
        pieces = [data[i : i + 50_000] for i in range(0, len(data), 50_000)]
        body = [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]
        result = post(navi.port, "/sessions/import", len(data), {**navi.headers, "Content-Type": "application/json"},
                      chunked=True, body=iter(body))
        assert result.status == 201, result.response[-300:]
        assert json.loads(result.response.split(b"\r\n\r\n", 1)[1])["message_count"] == 3000

    def test_an_import_over_its_limit_is_refused_before_the_body_is_read(self, navi):
        # SESSION_IMPORT_MAX_MB is 25 here: a 100 MB export is refused at the headers.
        baseline = rss_bytes(navi.proc.pid)
        declared = post(navi.port, "/sessions/import", 100 * MB, {**navi.headers, "Content-Type": "application/json"})
        assert declared.status == 413 and "SESSION_IMPORT_MAX_MB" in _error(declared)
        assert declared.sent < 8 * MB  # answered while the client was near the start
        streamed = post(navi.port, "/sessions/import", 100 * MB, navi.headers, chunked=True)
        assert streamed.status == 413 and 25 * MB <= streamed.sent < 40 * MB  # stopped at the 25 MB cap
        assert rss_bytes(navi.proc.pid) - baseline < 20 * MB

    def test_a_signed_in_body_over_the_limit_gets_413_early(self, navi, session_id):
        declared = post(navi.port, f"/sessions/{session_id}/files", 100 * MB, navi.headers)
        assert declared.status == 413 and declared.sent < 8 * MB
        streamed = post(navi.port, f"/sessions/{session_id}/files", 100 * MB, navi.headers, chunked=True)
        assert streamed.status == 413 and 60 * MB <= streamed.sent < 80 * MB  # stopped at the 60 MB cap

    def test_a_signed_in_upload_within_the_limit_still_works(self, navi, session_id):
        data = b"a" * 700_000  # over the anonymous cap: the credentials are checked first
        with navi.api() as client:
            response = client.post(f"/sessions/{session_id}/files", files={"file": ("notes.txt", data)})
        assert response.status_code == 201, response.text
        assert response.json()["size"] == len(data)

    def test_a_cookie_upload_within_the_limit_still_works(self, navi, session_id):
        with _logged_in(navi) as client:
            response = client.post(
                f"/sessions/{session_id}/files", files={"file": ("c.txt", b"c" * 300_000)},
                headers={"X-CSRFToken": client.cookies["csrftoken"]},
            )
        assert response.status_code == 201, response.text

    def test_expect_100_continue_is_answered_after_the_credentials_are_checked(self, navi):
        pad = "x" * 200_000
        body = json.dumps({"profile_id": "secretary", "pad": pad}).encode()
        headers = {**navi.headers, "Expect": "100-continue", "Content-Type": "application/json"}
        result = post(navi.port, "/sessions", len(body), headers)
        assert result.informational == [100] and result.status in (201, 400)

    def test_anonymous_small_requests_are_untouched(self, navi):
        response = httpx.post(f"{navi.url}/sessions", json={"pad": "x" * 1000}, timeout=30)
        assert response.status_code == 403 and "CSRF" in response.json()["error"]  # Django's answer, not the limit's
        assert httpx.get(f"{navi.url}/login/", timeout=30).status_code == 200


UPLOAD_BOUNDARY = "navi-test-boundary"


def _upload(navi: LiveNavi, token: str, session_id: str, size: int):
    total, chunks = multipart_chunks(size, UPLOAD_BOUNDARY)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": f"multipart/form-data; boundary={UPLOAD_BOUNDARY}"}
    return post(navi.port, f"/sessions/{session_id}/files", total, headers, body=chunks, timeout=60)


@pytest.mark.live
def test_four_signed_in_50_mb_uploads_at_once_cost_the_server_little_memory(navi):
    """Issue #26 item 4: one 199 MB upload by a plain user peaked the server at 2.75 GB RSS
    (Twisted parsed the multipart body in memory; daphne queued all of it as messages)."""
    token = navi.add_user("plain")
    with httpx.Client(base_url=navi.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        sessions = [client.post("/sessions", json={"new": True}).json()["session_id"] for _ in range(4)]
    _upload(navi, token, sessions[0], 1 * MB)  # warm up: the upload code is loaded
    baseline = rss_bytes(navi.proc.pid)
    sampler, results = RssSampler(navi.proc.pid, every=0.01), []
    sampler.start()
    workers = [threading.Thread(target=lambda s=s: results.append(_upload(navi, token, s, 50 * MB))) for s in sessions]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    growth = sampler.stop() - baseline
    assert [r.status for r in results] == [201] * 4, [r.response[-300:] for r in results]
    assert all(json.loads(r.response.split(b"\r\n\r\n", 1)[1])["size"] == 50 * MB for r in results)
    assert growth < 64 * MB, f"server RSS grew by {growth / MB:.0f} MB for 4 x 50 MB uploads"


def _error(result) -> str:
    return json.loads(result.response.split(b"\r\n\r\n", 1)[1])["error"]


@contextlib.contextmanager
def _logged_in(navi: LiveNavi):
    """An httpx client signed in through the login form (session cookie + CSRF cookie)."""
    with httpx.Client(base_url=navi.url, timeout=30) as client:
        client.get("/login/")
        response = client.post("/login/", data={"username": navi.username, "password": navi.password,
                                                "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        assert response.status_code == 302, response.text
        yield client


class TestWebSocketOriginAgainstTheServer:
    def _open(self, navi, session_id, origin):
        async def attempt():
            with _logged_in(navi) as client:
                cookie = f"sessionid={client.cookies['sessionid']}"
            try:
                async with websockets.connect(navi.ws_url(session_id), origin=origin, additional_headers={"Cookie": cookie}) as ws:
                    await ws.send(json.dumps({"type": "ping"}))
                    return json.loads(await asyncio.wait_for(ws.recv(), 15))
            except websockets.ConnectionClosed as closed:
                return closed.rcvd.code

        return asyncio.run(attempt())

    def test_a_cookie_socket_from_another_port_is_closed_with_4403(self, navi, session_id):
        assert self._open(navi, session_id, "http://127.0.0.1:9999") == 4403

    def test_a_cookie_socket_from_the_server_origin_connects(self, navi, session_id):
        assert self._open(navi, session_id, navi.url) == {"type": "pong"}


def test_login_failures_are_counted_across_two_server_processes(navi):
    second = LiveNavi(env={"SESSION_FILES_MAX_SIZE_MB": "1"}, data_dir=navi.data_dir).start()
    try:
        def fail(server: LiveNavi) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                client.get("/login/")
                return client.post("/login/", data={"username": navi.username, "password": "wrong",
                                                    "csrfmiddlewaretoken": client.cookies["csrftoken"]})

        assert [fail(s).status_code for s in (navi, second, navi, second, navi)] == [200] * 5
        refused = fail(second)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    finally:
        second.stop()


# --- the ASGI guard (any other ASGI server, e.g. uvicorn) ------------------------------------
class _App:
    """A stand-in for Django: reads the whole body, then answers 200."""

    def __init__(self):
        self.called, self.messages = False, []

    async def __call__(self, scope, receive, send):
        self.called = True
        while True:
            message = await receive()
            self.messages.append(message["type"])
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        if self.messages[-1] != "http.disconnect":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})


async def _through_guard(headers: list[tuple[bytes, bytes]], chunks: list[bytes], method: str = "POST",
                         path: str = "/sessions/x/files") -> tuple[_App, list[dict]]:
    from sessions_app.bodylimit import BodyLimitMiddleware

    app, sent, queue = _App(), [], list(chunks)

    async def receive():
        body = queue.pop(0) if queue else b""
        return {"type": "http.request", "body": body, "more_body": bool(queue)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    await BodyLimitMiddleware(app)(scope, receive, send)
    return app, sent


@pytest.mark.django_db(transaction=True)
class TestAsgiGuard:
    async def test_it_refuses_a_content_length_over_the_limit_without_calling_the_app(self, settings):
        settings.SESSION_FILES_MAX_SIZE_MB = 1
        app, sent = await _through_guard([(b"content-length", str(300 * MB).encode())], [])
        assert not app.called and sent[0]["status"] == 413

    async def test_it_refuses_an_anonymous_body_over_the_small_cap(self):
        app, sent = await _through_guard([(b"content-length", str(MB).encode())], [])
        assert not app.called and sent[0]["status"] == 413
        assert "without credentials" in json.loads(sent[1]["body"])["error"]

    async def test_it_stops_an_anonymous_chunked_body_at_the_cap(self):
        app, sent = await _through_guard([], [b"x" * 32 * 1024] * 100)
        assert app.called and app.messages[-1] == "http.disconnect"
        assert len(app.messages) <= 4 and sent[0]["status"] == 413

    async def test_a_valid_token_may_send_a_bigger_body(self, owner_token):
        headers = [(b"content-length", str(MB).encode()), (b"authorization", f"Bearer {owner_token}".encode())]
        app, sent = await _through_guard(headers, [b"x" * MB])
        assert app.called and sent[0]["status"] == 200

    async def test_a_bad_token_may_not(self):
        headers = [(b"content-length", str(MB).encode()), (b"authorization", b"Bearer nope")]
        app, sent = await _through_guard(headers, [b"x" * MB])
        assert not app.called and sent[0]["status"] == 401
        assert "invalid API token" in json.loads(sent[1]["body"])["error"]

    async def test_a_stale_login_cookie_is_told_to_log_in_again(self):
        headers = [(b"content-length", str(MB).encode()), (b"cookie", b"sessionid=not-a-live-session")]
        app, sent = await _through_guard(headers, [b"x" * MB])
        assert not app.called and sent[0]["status"] == 401
        assert "log in again" in json.loads(sent[1]["body"])["error"]

    async def test_a_malformed_authorization_header_is_named(self):
        headers = [(b"content-length", str(MB).encode()), (b"authorization", b"Basic b3duZXI6cHc=")]
        app, sent = await _through_guard(headers, [b"x" * MB])
        assert not app.called and sent[0]["status"] == 401
        assert "malformed Authorization header" in json.loads(sent[1]["body"])["error"]

    async def test_a_get_with_a_bad_token_reaches_the_app(self):
        # No body at all: nothing for the guard to judge; Django answers the bad token itself.
        app, sent = await _through_guard([(b"authorization", b"Bearer nope")], [], method="GET")
        assert app.called and sent[0]["status"] == 200

    async def test_an_import_over_its_own_limit_is_refused(self, owner_token, settings):
        settings.SESSION_IMPORT_MAX_MB = 1
        headers = [(b"content-length", str(2 * MB).encode()), (b"authorization", f"Bearer {owner_token}".encode())]
        app, sent = await _through_guard(headers, [], path="/sessions/import")
        assert not app.called and sent[0]["status"] == 413
        assert "SESSION_IMPORT_MAX_MB" in json.loads(sent[1]["body"])["error"]

    async def test_a_document_over_its_own_limit_is_refused_with_400(self, owner_token, settings):
        settings.KNOWLEDGE_MAX_FILE_MB = 1
        headers = [(b"content-length", str(2 * MB).encode()), (b"authorization", f"Bearer {owner_token}".encode())]
        app, sent = await _through_guard(headers, [], path="/knowledge")
        assert not app.called and sent[0]["status"] == 400  # DESIGN §10: oversized → 400
        assert "KNOWLEDGE_MAX_FILE_MB" in json.loads(sent[1]["body"])["error"]

    async def test_small_anonymous_bodies_pass(self):
        app, sent = await _through_guard([(b"content-length", b"20")], [b"username=a&password=b"])
        assert app.called and sent[0]["status"] == 200
