"""web_search (stubbed ddgs backend only), web_view and http_request against a local HTTP
server, and the SSRF guard: numeric tricks, internal ranges, redirects, size cap, pinning."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from navi_project.netguard import URLRefused, fetch, parse_url, resolve_checked
from tools_app.builtin.web import HttpRequestTool, WebSearchTool, WebViewTool

PAGE = """<html><head><title>Cats &amp; Dogs</title><script>var secret=1;</script></head>
<body><nav>menu</nav><article><h1>All about cats</h1>
<p>Cats are small carnivorous mammals that people have kept as pets for thousands of years.
<a href="/more">Read more</a></p>
<p>Dogs, on the other hand, were domesticated even earlier and come in many breeds.</p>
</article></body></html>"""


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8", extra: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _hop(self) -> None:
        """/hop?code=307&to=URL: a redirect with that status that also sets a cookie."""
        query = parse_qs(urlsplit(self.path).query)
        self._send(int(query["code"][0]), b"", extra={"Location": query["to"][0], "Set-Cookie": "sid=first-site"})

    def do_GET(self):
        self.server.seen.append({"path": self.path, "host": self.headers.get("Host"), "method": "GET", "headers": dict(self.headers)})
        if self.path.startswith("/hop?"):
            self._hop()
        elif self.path == "/page":
            self._send(200, PAGE.encode())
        elif self.path == "/big":
            self._send(200, b"x" * (3 * 1024 * 1024), "text/plain")
        elif self.path.startswith("/redirect?to="):
            self._send(302, b"", extra={"Location": self.path.split("=", 1)[1]})
        elif self.path == "/loop":
            self._send(302, b"", extra={"Location": "/loop"})
        elif self.path == "/bin":
            self._send(200, b"\x00\x01\x02", "application/octet-stream")
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append({"path": self.path, "host": self.headers.get("Host"), "method": "POST", "body": raw, "headers": dict(self.headers)})
        if self.path.startswith("/hop?"):
            return self._hop()
        self._send(201, json.dumps({"got": json.loads(raw or b"null")}).encode(), "application/json", {"X-Custom": "1"})


def _start_web_server() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    return server


@pytest.fixture
def web_server():
    server = _start_web_server()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def other_web_server():
    """A second local server: same host, another port, so another origin."""
    server = _start_web_server()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def allow_local(settings):
    settings.HTTP_ALLOWED_HOSTS = ["127.0.0.1"]


# --- the guard -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://localhost/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.5/",
        "http://192.168.1.1/",
        "http://172.16.0.1/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://0x7f000001/",
        "http://0x7f.0.0.1/",
        "http://127.1/",
        "http://evil@127.0.0.1/",
        "file:///etc/passwd",
        "ftp://example.com/",
        "gopher://127.0.0.1:25/",
        "not a url",
        "",
    ],
)
async def test_internal_and_tricky_urls_refused(url, settings):
    settings.HTTP_ALLOWED_HOSTS = []
    with pytest.raises(URLRefused) as info:
        await fetch(url)
    assert str(info.value)  # a readable reason


async def test_allowed_host_does_not_allow_numeric_aliases(settings):
    settings.HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    for url in ("http://127.1/", "http://2130706433/", "http://0x7f000001/"):
        with pytest.raises(URLRefused, match="canonical"):
            parse_url(url)
    with pytest.raises(URLRefused, match="loopback"):
        await resolve_checked(parse_url("http://localhost/"))


async def test_refusal_message_says_what_to_do(settings):
    settings.HTTP_ALLOWED_HOSTS = []
    result = await WebViewTool().execute({"url": "http://169.254.169.254/latest/meta-data/"})
    assert not result.success
    assert "link-local" in result.error and "HTTP_ALLOWED_HOSTS" in result.error


async def test_local_server_only_reachable_when_allowed(web_server, settings):
    settings.HTTP_ALLOWED_HOSTS = []
    refused = await HttpRequestTool().execute({"url": web_server.base + "/page"})
    assert not refused.success and "loopback" in refused.error
    assert web_server.seen == []  # never connected
    settings.HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    ok = await HttpRequestTool().execute({"url": web_server.base + "/page"})
    assert ok.success and ok.output.startswith("HTTP 200")


async def test_redirect_to_metadata_address_refused(web_server, allow_local):
    url = web_server.base + "/redirect?to=http://169.254.169.254/latest/meta-data/"
    result = await WebViewTool().execute({"url": url})
    assert not result.success and "169.254.169.254" in result.error


async def test_redirect_to_non_allowed_alias_refused(web_server, allow_local):
    port = web_server.server_address[1]
    result = await HttpRequestTool().execute({"url": f"{web_server.base}/redirect?to=http://localhost:{port}/page"})
    assert not result.success and "loopback" in result.error
    assert [s["path"] for s in web_server.seen] == [f"/redirect?to=http://localhost:{port}/page"]


async def test_redirect_within_allowed_host_followed(web_server, allow_local):
    result = await WebViewTool().execute({"url": web_server.base + "/redirect?to=/page"})
    assert result.success, result.error
    assert "Cats are small carnivorous mammals" in result.output


async def test_an_allowed_host_with_a_port_allows_only_that_port(web_server, other_web_server, settings):
    settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{web_server.server_address[1]}"]
    assert (await HttpRequestTool().execute({"url": web_server.base + "/page"})).success
    refused = await HttpRequestTool().execute({"url": other_web_server.base + "/page"})
    assert not refused.success and "loopback" in refused.error
    assert other_web_server.seen == []


async def test_a_bare_allowed_host_allows_any_port(web_server, other_web_server, settings):
    settings.HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    assert (await HttpRequestTool().execute({"url": web_server.base + "/page"})).success
    assert (await HttpRequestTool().execute({"url": other_web_server.base + "/page"})).success


@pytest.mark.parametrize("entry,host,port,allowed", [
    ("nas.lan:8123", "nas.lan", 8123, True), ("nas.lan:8123", "nas.lan", 80, False),
    ("NAS.lan", "nas.lan", 8080, True), ("[::1]:8080", "::1", 8080, True), ("[::1]:8080", "::1", 80, False),
    ("::1", "::1", 443, True), ("nas.lan", "other.lan", 80, False),
])
def test_allowed_host_entries_match_host_and_port(settings, entry, host, port, allowed):
    from navi_project.netguard import host_allowed

    settings.HTTP_ALLOWED_HOSTS = [entry]
    assert host_allowed(host, port) is allowed


MODEL_HEADERS = {
    "Authorization": "Bearer model-secret", "Cookie": "sid=model", "Proxy-Authorization": "Basic eA==",
    "X-Api-Key": "model-key", "Accept": "application/json", "Accept-Language": "de", "User-Agent": "navi-test",
}


async def test_a_redirect_to_another_origin_keeps_only_safe_headers(web_server, other_web_server, allow_local):
    url = f"{web_server.base}/hop?code=302&to={other_web_server.base}/page"
    res = await fetch(url, headers=MODEL_HEADERS)
    assert res.status == 200
    first, second = web_server.seen[0]["headers"], other_web_server.seen[0]["headers"]
    assert first["Authorization"] == "Bearer model-secret" and first["X-Api-Key"] == "model-key"
    for dropped in ("Authorization", "Cookie", "Proxy-Authorization", "X-Api-Key"):
        assert dropped not in second
    assert (second["Accept"], second["Accept-Language"], second["User-Agent"]) == ("application/json", "de", "navi-test")


async def test_a_307_to_another_origin_keeps_the_body_and_its_content_type_only(web_server, other_web_server, allow_local):
    url = f"{web_server.base}/hop?code=307&to={other_web_server.base}/echo"
    headers = {**MODEL_HEADERS, "Content-Type": "application/json"}
    res = await fetch(url, "POST", headers=headers, content=b'{"a": 1}')
    assert res.status == 201
    seen = other_web_server.seen[0]
    assert seen["method"] == "POST" and seen["body"] == b'{"a": 1}'
    assert seen["headers"]["Content-Type"] == "application/json"
    assert "Authorization" not in seen["headers"] and "X-Api-Key" not in seen["headers"]


async def test_a_302_to_another_origin_drops_the_body_and_its_content_type(web_server, other_web_server, allow_local):
    url = f"{web_server.base}/hop?code=302&to={other_web_server.base}/page"
    await fetch(url, "POST", headers={"Content-Type": "application/json"}, content=b"{}")
    seen = other_web_server.seen[0]
    assert seen["method"] == "GET" and "Content-Type" not in seen["headers"]


async def test_a_cookie_set_by_the_first_site_does_not_reach_another_origin(web_server, other_web_server, allow_local):
    await fetch(f"{web_server.base}/hop?code=302&to={other_web_server.base}/page")
    assert "Cookie" not in other_web_server.seen[0]["headers"]


async def test_a_same_origin_redirect_keeps_the_headers(web_server, allow_local):
    await fetch(f"{web_server.base}/hop?code=302&to=/page", headers={"Authorization": "Bearer same-site"})
    assert web_server.seen[1]["headers"]["Authorization"] == "Bearer same-site"
    assert web_server.seen[1]["headers"]["Cookie"] == "sid=first-site"


async def test_redirect_loop_stops(web_server, allow_local):
    result = await HttpRequestTool().execute({"url": web_server.base + "/loop"})
    assert not result.success and "redirects" in result.error
    assert len(web_server.seen) == 6


async def test_response_size_capped(web_server, allow_local):
    res = await fetch(web_server.base + "/big", max_bytes=64 * 1024)
    assert res.truncated and len(res.body) == 64 * 1024
    result = await HttpRequestTool().execute({"url": web_server.base + "/big"})
    assert result.success and "only the beginning was read" in result.output
    assert "[body truncated at" in result.output


async def test_connection_pinned_to_checked_address(web_server, settings, monkeypatch):
    """DNS rebinding: the hostname resolves once; the connection uses that checked address and
    keeps the real Host header. 'rebind.invalid' does not exist in real DNS, so a second lookup
    would fail — only the (stubbed) checked resolution is ever used."""
    from navi_project import netguard

    lookups = []

    async def one_answer(host, port):
        lookups.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(netguard, "_resolve", one_answer)
    settings.HTTP_ALLOWED_HOSTS = ["rebind.invalid"]
    port = web_server.server_address[1]
    res = await fetch(f"http://rebind.invalid:{port}/page")
    assert res.status == 200 and lookups == ["rebind.invalid"]
    assert web_server.seen[-1]["host"] == f"rebind.invalid:{port}"
    # Without the allowlist the same answer is refused before any connection.
    settings.HTTP_ALLOWED_HOSTS = []
    with pytest.raises(URLRefused):
        await fetch(f"http://rebind.invalid:{port}/page")


# --- web_view / http_request ---------------------------------------------------------------
async def test_web_view_readable_markdown(web_server, allow_local):
    result = await WebViewTool().execute({"url": web_server.base + "/page"})
    assert result.success, result.error
    assert "Title: Cats & Dogs" in result.output
    assert "Cats are small carnivorous mammals" in result.output
    assert "Read more" in result.output and "var secret" not in result.output


async def test_web_view_max_chars_note(web_server, allow_local):
    result = await WebViewTool().execute({"url": web_server.base + "/page", "max_chars": 200})
    assert result.success and "[truncated: showing 200 of" in result.output


async def test_web_view_http_error_and_binary(web_server, allow_local):
    missing = await WebViewTool().execute({"url": web_server.base + "/nope"})
    assert not missing.success and "404" in missing.error
    binary = await WebViewTool().execute({"url": web_server.base + "/bin"})
    assert not binary.success and "http_request" in binary.error


def test_html_fallback_extractor():
    from tools_app.builtin.web import html_to_text

    text = html_to_text("<p>Hello <b>world</b></p><script>alert(1)</script><p>again")
    assert "Hello world" in text and "again" in text and "alert" not in text


async def test_http_request_post_json(web_server, allow_local):
    result = await HttpRequestTool().execute(
        {"method": "POST", "url": web_server.base + "/api", "json": {"a": 1}, "headers": {"X-Test": "yes"}}
    )
    assert result.success, result.error
    assert result.output.startswith("HTTP 201")
    assert "content-type: application/json" in result.output
    assert '{"got": {"a": 1}}' in result.output
    assert web_server.seen[-1]["body"] == b'{"a": 1}'


async def test_http_request_takes_empty_placeholders_as_not_given(web_server, allow_local):
    """Small models fill every optional field: an empty `body` and `json` on a GET are no body."""
    result = await HttpRequestTool().execute(
        {"method": "GET", "url": web_server.base + "/page", "headers": {}, "body": "", "json": {}}
    )
    assert result.success, result.error
    assert result.output.startswith("HTTP 200")
    posted = await HttpRequestTool().execute(
        {"method": "POST", "url": web_server.base + "/api", "body": "", "json": {"note": "hi"}}
    )
    assert posted.success, posted.error
    assert web_server.seen[-1]["body"] == b'{"note": "hi"}'
    both = await HttpRequestTool().execute(
        {"method": "POST", "url": web_server.base + "/api", "body": "raw", "json": {"note": "hi"}}
    )
    assert not both.success and "not both" in both.error


async def test_http_request_unreachable_is_readable(settings):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    settings.HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    result = await HttpRequestTool().execute({"url": f"http://127.0.0.1:{port}/"})
    assert not result.success and "could not fetch" in result.error


# --- web_search (only the ddgs backend is stubbed) -----------------------------------------
async def test_web_search_formats_results(monkeypatch):
    import ddgs.ddgs  # the real class: `ddgs.DDGS` is a lazy proxy

    calls = []

    def fake_text(self, query, **kwargs):
        calls.append((query, kwargs))
        return [
            {"title": "Result one", "href": "https://one.example/", "body": "first snippet"},
            {"title": "Result two", "href": "https://two.example/", "body": "second snippet"},
        ]

    monkeypatch.setattr(ddgs.ddgs.DDGS, "text", fake_text)
    result = await WebSearchTool().execute({"query": "navi agent", "max_results": 2})
    assert result.success
    assert "1. Result one\n   https://one.example/\n   first snippet" in result.output
    assert calls == [("navi agent", {"max_results": 2})]


@pytest.mark.parametrize(
    "exc_name, expected",
    [
        ("RatelimitException", "rate-limiting"),
        ("TimeoutException", "timed out"),
        ("DDGSException", "no results"),
    ],
)
async def test_web_search_errors_are_readable(monkeypatch, exc_name, expected):
    import ddgs.ddgs  # the real class: `ddgs.DDGS` is a lazy proxy
    from ddgs import exceptions

    def failing(self, query, **kwargs):
        raise getattr(exceptions, exc_name)("No results found.")

    monkeypatch.setattr(ddgs.ddgs.DDGS, "text", failing)
    result = await WebSearchTool().execute({"query": "zzzz"})
    assert not result.success and expected in result.error


async def test_web_search_empty_list(monkeypatch):
    import ddgs.ddgs  # the real class: `ddgs.DDGS` is a lazy proxy

    monkeypatch.setattr(ddgs.ddgs.DDGS, "text", lambda self, q, **kw: [])
    result = await WebSearchTool().execute({"query": "nothing"})
    assert not result.success and "different keywords" in result.error
