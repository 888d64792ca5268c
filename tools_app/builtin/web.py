"""Web tools: web_search (ddgs), web_view (readable page text) and http_request (raw HTTP).

web_view and http_request go through `navi_project.netguard.fetch`, which checks every redirect
hop against SSRF, pins the checked address and caps the response size.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
from html.parser import HTMLParser
from typing import Any

import httpx

from navi_project.netguard import URLRefused, fetch
from tools_app.base import Tool, ToolResult

log = logging.getLogger(__name__)

WEB_VIEW_MAX_BYTES = 5 * 1024 * 1024
HTTP_MAX_BYTES = 1024 * 1024
HTTP_BODY_MAX_CHARS = 20_000
SHOWN_HEADERS = (
    "content-type", "content-length", "location", "date", "last-modified", "etag",
    "cache-control", "retry-after", "www-authenticate", "server",
)


def _fetch_error(url: str, exc: Exception) -> ToolResult:
    """A readable tool error for a refused or failed fetch."""
    if isinstance(exc, URLRefused):
        return ToolResult(False, error=str(exc))
    if isinstance(exc, httpx.TimeoutException):
        return ToolResult(False, error=f"{url} did not answer in time; retry later or raise `timeout`")
    return ToolResult(False, error=f"could not fetch {url}: {type(exc).__name__}: {exc}. Check the URL and retry")


# --- web_search ----------------------------------------------------------------------------
def _ddgs_text(query: str, max_results: int) -> list[dict]:
    from ddgs import DDGS

    return DDGS().text(query, max_results=max_results)


class WebSearchTool(Tool):
    name = "web_search"
    keywords = "search web internet google lookup news find online"
    examples = (
        "look up the latest news about electric cars",
        "search online for a good lasagne recipe",
        "find out who won the football match last night",
        "what is the weather forecast for Berlin this weekend?",
        "google the opening hours of the city museum",
    )
    description = (
        "Search the web (DuckDuckGo and others via ddgs). Returns title, URL and snippet for each "
        "result; open a promising result with web_view."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "search terms"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 25, "default": 8},
        },
        "required": ["query"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

        query = params["query"].strip()
        if not query:
            return ToolResult(False, error="empty query; give some search terms")
        max_results = int(params.get("max_results") or 8)
        try:
            results = await asyncio.to_thread(_ddgs_text, query, max_results)
        except RatelimitException:
            return ToolResult(False, error="the search engine is rate-limiting us; wait a minute before searching again, or open a known URL with web_view")
        except TimeoutException:
            return ToolResult(False, error="the search timed out; retry once, or rephrase the query")
        except DDGSException as exc:
            if "no results" in str(exc).lower():
                return ToolResult(False, error=f"no results for '{query}'; try fewer or different keywords")
            return ToolResult(False, error=f"search failed ({exc}); retry later or rephrase the query")
        if not results:
            return ToolResult(False, error=f"no results for '{query}'; try fewer or different keywords")
        return ToolResult(True, _format_results(results[:max_results]))


def _format_results(results: list[dict]) -> str:
    lines = []
    for i, r in enumerate(results, 1):
        title = (r.get("title") or "(no title)").strip()
        url = r.get("href") or r.get("url") or ""
        snippet = (r.get("body") or r.get("snippet") or "").strip()
        lines.append(f"{i}. {title}\n   {url}\n   {snippet}")
    return "\n\n".join(lines)


# --- web_view ------------------------------------------------------------------------------
class _TextExtractor(HTMLParser):
    """Fallback HTML → text: drop script/style, keep block breaks."""

    _SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    _BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self._skipping:
            self.parts.append(data)


def html_to_text(markup: str) -> str:
    parser = _TextExtractor()
    try:
        parser.feed(markup)
        parser.close()
    except Exception:  # malformed markup: keep what was parsed
        pass
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parser.parts))
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


def _title(markup: str) -> str:
    match = re.search(r"<title[^>]*>(.*?)</title>", markup, re.IGNORECASE | re.DOTALL)
    return html.unescape(re.sub(r"\s+", " ", match.group(1))).strip() if match else ""


def readable(markup: str, url: str) -> tuple[str, str]:
    """(title, markdown) of an HTML page: trafilatura first, simple text extraction as fallback."""
    text = ""
    try:
        import trafilatura

        text = trafilatura.extract(markup, output_format="markdown", include_links=True, url=url) or ""
    except Exception:
        log.info("trafilatura failed on %s", url, exc_info=True)
    return _title(markup), text.strip() or html_to_text(markup)


class WebViewTool(Tool):
    name = "web_view"
    keywords = "open read page website web url link site article html"
    examples = (
        "open this page and tell me what it says",
        "read the article at this link and summarise it",
        "what is the title of the website at this address?",
        "visit the URL and give me the main points",
    )
    description = (
        "Open a web page and return its readable text as markdown (title, main content, links). "
        "Long pages are cut at max_chars. Internal/LAN addresses are refused unless allowed by the owner."
    )
    parameters = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "full http(s) URL"},
            "max_chars": {"type": "integer", "minimum": 200, "maximum": 100000, "default": 12000},
        },
        "required": ["url"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        url, max_chars = params["url"], int(params.get("max_chars") or 12000)
        try:
            res = await fetch(url, max_bytes=WEB_VIEW_MAX_BYTES)
        except Exception as exc:
            return _fetch_error(url, exc)
        if res.status >= 400:
            return ToolResult(False, error=f"{res.url} answered HTTP {res.status}; check the URL or try another source")
        ctype = res.content_type
        if "html" in ctype or (not ctype and res.body.lstrip()[:1] == b"<"):
            title, text = await asyncio.to_thread(readable, res.text(), res.url)
        elif ctype.startswith("text/") or ctype in ("application/json", "application/xml") or ctype.endswith("+json"):
            title, text = "", res.text()
        else:
            return ToolResult(
                False,
                error=f"{res.url} is {ctype or 'binary content'}, not a web page; use image_view for images or http_request for raw data",
            )
        header = [f"URL: {res.url}"] + ([f"Title: {title}"] if title else [])
        notes = []
        if res.truncated:
            notes.append(f"[the page is larger than {WEB_VIEW_MAX_BYTES // (1024 * 1024)} MB; only the beginning was read]")
        if len(text) > max_chars:
            notes.append(f"[truncated: showing {max_chars} of {len(text)} characters; raise max_chars to see more]")
            text = text[:max_chars]
        return ToolResult(True, "\n".join(header) + "\n\n" + (text or "(the page has no readable text)") + ("\n\n" + "\n".join(notes) if notes else ""))


# --- http_request --------------------------------------------------------------------------
class HttpRequestTool(Tool):
    name = "http_request"
    keywords = "fetch get post put patch delete api json endpoint webhook url request send"
    examples = (
        "call this API endpoint and show me the JSON",
        "send a POST request with this data to the webhook",
        "get the status of my order from the shop's API",
        "fetch the JSON from this address",
    )
    # A small model's step writes the method first, and a body only where one is sent.
    action_parameter = "method"
    actions = {"GET": "url headers? timeout?", "POST": "url headers? json? body? timeout?",
               "PUT": "url headers? json? body? timeout?", "PATCH": "url headers? json? body? timeout?",
               "DELETE": "url headers? timeout?", "HEAD": "url headers? timeout?", "OPTIONS": "url headers? timeout?"}
    # The methods that change something on the server, each with the words a request says when
    # it wants one: a small model's step offers it only then (a 0.5B model POSTed to a page it
    # was asked to read). Not a task's wording: what the methods mean.
    _ASKED_BY = {
        "POST": re.compile(r"\b(post|send|submit|upload|create|webhook|notify)", re.I),
        "PUT": re.compile(r"\b(put|replace|update|upload)\b", re.I),
        "PATCH": re.compile(r"\b(patch|update|change)", re.I),
        "DELETE": re.compile(r"\b(delete|remove)", re.I),
    }

    def unasked_actions(self, request: str) -> frozenset[str]:
        return frozenset(m for m, words in self._ASKED_BY.items() if not words.search(request or ""))

    description = (
        "Send an HTTP request (APIs, webhooks, raw pages). Returns status, key headers and the "
        "body (capped). Use `json` for a JSON body or `body` for raw text. Internal/LAN "
        "addresses are refused unless the owner allowed the host."
    )
    parameters = {
        "type": "object",
        "properties": {
            "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"], "default": "GET"},
            "url": {"type": "string", "description": "full http(s) URL"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": "string", "description": "raw request body"},
            "json": {"description": "JSON request body (sets Content-Type)"},
            "timeout": {"type": "number", "minimum": 1, "maximum": 120, "default": 20},
        },
        "required": ["url"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        # Already the enum's spelling (ToolRegistry.prepare): the method the policy judged.
        method = params.get("method") or "GET"
        url = params["url"]
        headers = dict(params.get("headers") or {})
        content = None
        body, has_json = _body_and_json(method, params)
        if has_json and body is not None:
            return ToolResult(False, error="give either `body` or `json`, not both")
        if has_json:
            content = json.dumps(params["json"]).encode()
            headers.setdefault("Content-Type", "application/json")
        elif body is not None:
            content = body.encode()
        try:
            res = await fetch(url, method, headers, content, timeout=float(params.get("timeout") or 20), max_bytes=HTTP_MAX_BYTES)
        except Exception as exc:
            return _fetch_error(url, exc)
        return ToolResult(True, _format_response(res))


def _body_and_json(method: str, params: dict[str, Any]) -> tuple[str | None, bool]:
    """The raw body and whether a JSON body is given. Small models fill every optional field
    ("body": "", "json": {}): an empty body counts as none, and an empty or null `json` does
    when a body is given or the method sends none."""
    body = params.get("body") or None
    value = params.get("json", None)
    has_json = "json" in params and value is not None
    if has_json and value in ("", {}, []) and (body is not None or method in ("GET", "HEAD", "OPTIONS")):
        has_json = False
    return body, has_json


def _format_response(res) -> str:
    lines = [f"HTTP {res.status}  ({res.url})"]
    if res.redirects:
        lines.append("Redirected via: " + " → ".join(res.redirects))
    for name in SHOWN_HEADERS:
        if name in res.headers:
            lines.append(f"{name}: {res.headers[name]}")
    ctype = res.content_type
    textual = not ctype or ctype.startswith("text/") or "json" in ctype or "xml" in ctype or "javascript" in ctype
    if not textual:
        body = f"({len(res.body)} bytes of {ctype}; not shown)"
    else:
        body = res.text()
        if len(body) > HTTP_BODY_MAX_CHARS:
            body = body[:HTTP_BODY_MAX_CHARS] + f"\n[body truncated at {HTTP_BODY_MAX_CHARS} characters]"
    if res.truncated:
        body += f"\n[response larger than {HTTP_MAX_BYTES} bytes; only the beginning was read]"
    return "\n".join(lines) + "\n\n" + body
