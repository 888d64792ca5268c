"""OpenAI-compatible backend on httpx: any server with /v1/chat/completions (SSE streaming)."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import httpx
from django.conf import settings

from agent.llm.messages import ChatMessage, LLMChunk, ToolCall
from navi_project import connections

from .base import (
    ClientCache,
    LLMBackend,
    LLMError,
    LLMIncomplete,
    LLMModelMissing,
    LLMUnreachable,
    OutputSchema,
    overflow_error,
)


def _to_openai(msg: ChatMessage) -> dict[str, Any]:
    if msg.role == "tool":
        return {"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.content or ""}
    out: dict[str, Any] = {"role": msg.role, "content": msg.content or ""}
    if msg.images:
        out["content"] = [{"type": "text", "text": msg.content or ""}] + [
            {"type": "image_url", "image_url": {"url": f"data:{_image_mime(img)};base64,{img}"}} for img in msg.images
        ]
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
                },
            }
            for c in msg.tool_calls
        ]
    return out


WINDOW_TTL_S = 600.0


class OpenAIBackend(LLMBackend):
    name = "openai"
    schema_ways = ("response_format", "json_schema")

    def __init__(self, base_url: str | None = None, api_key: str | None = None, name: str = "openai") -> None:
        self.name = name  # the profiles' llm_backend: "openai" (.env's server) or a server named in Settings
        self._base_url = base_url
        self._api_key = api_key
        self._clients = ClientCache()
        self._windows: dict[tuple[str, str], tuple[float, int | None]] = {}
        self._entries: dict[tuple[str, str], tuple[float, dict]] = {}

    @property
    def base_url(self) -> str:
        if self._base_url:
            return self._base_url.rstrip("/")
        server = connections.server(self.name)
        return server.base_url if server else settings.OPENAI_BASE_URL.rstrip("/")

    @property
    def api_key(self) -> str:
        if self._api_key is not None:
            return self._api_key
        server = connections.server(self.name)
        return server.api_key if server else settings.OPENAI_API_KEY

    def _client(self) -> httpx.AsyncClient:
        base_url, api_key, timeout = self.base_url, self.api_key, settings.LLM_TIMEOUT_S
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return self._clients.get(
            (base_url, api_key, timeout),
            lambda: httpx.AsyncClient(base_url=base_url, headers=headers, timeout=httpx.Timeout(timeout, connect=5.0)),
        )

    async def _stream(
        self,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]] | None,
        *,
        model: str,
        temperature: float,
        think: bool | None,
        max_tokens: int | None,
        output: OutputSchema | None = None,
    ) -> AsyncIterator[LLMChunk]:
        body = _request_body(messages, tools, model, temperature, max_tokens, output)
        state = _StreamState()
        with self._transport_errors():
            async with self._client().stream("POST", "/chat/completions", json=body) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._http_error(response, model)
                async for event in _events(response, state):
                    if event.get("error"):
                        raise self._stream_error(event["error"])
                    for chunk in state.feed(event):
                        yield chunk
        if not state.done and not state.finish:
            # A 200 stream that just stops (llama-cpp-python raising after the headers went out).
            raise LLMIncomplete(
                f"{self.base_url} ended the answer without finishing it (no finish reason, no [DONE]); "
                "the server may have run out of context or crashed — see its log"
            )
        yield state.last_chunk()

    @contextlib.contextmanager
    def _transport_errors(self):
        """httpx failures as LLM errors saying what to check."""
        try:
            yield
        except (httpx.ConnectError, httpx.ConnectTimeout):
            raise LLMUnreachable(
                f"cannot reach the OpenAI-compatible server at {self.base_url} — is it running? Check OPENAI_BASE_URL."
            ) from None
        except httpx.ReadTimeout:
            raise LLMError(
                f"{self.base_url} sent nothing for {settings.LLM_TIMEOUT_S:g} s (LLM_TIMEOUT_S); "
                "the server may be busy with another request",
                mid_answer=True,
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise LLMError(
                f"the connection to {self.base_url} dropped mid-answer ({type(exc).__name__})", mid_answer=True
            ) from None

    def _stream_error(self, error: Any) -> LLMError:
        """An error object sent inside a 200 stream (llama.cpp: context overflow, a killed slot)."""
        if isinstance(error, dict):
            detail = str(error.get("message") or error.get("type") or error)
            overflow = overflow_error(
                detail, self.base_url, int(error.get("n_prompt_tokens") or 0), int(error.get("n_ctx") or 0)
            )
            if overflow is None and error.get("type") == "exceed_context_size_error":
                overflow = overflow_error(f"{detail} (context size exceeded)", self.base_url)
        else:
            detail = str(error)
            overflow = overflow_error(detail, self.base_url)
        return overflow or LLMIncomplete(f"{self.base_url} stopped the answer with an error: {detail}")

    def _http_error(self, response: httpx.Response, model: str) -> LLMError:
        error: Any = None
        try:
            error = response.json().get("error")
            detail = error.get("message") if isinstance(error, dict) else error
        except (ValueError, AttributeError):
            detail = response.text[:300]
        detail = str(detail)
        if response.status_code == 404:
            return LLMModelMissing(f"model '{model}' not found at {self.base_url}: {detail}. Set OPENAI_MODEL or the profile's model.")
        if response.status_code in (401, 403):
            return LLMError(f"{self.base_url} refused the API key ({detail}); set OPENAI_API_KEY")
        if isinstance(error, dict):
            overflow = overflow_error(
                detail, self.base_url, int(error.get("n_prompt_tokens") or 0), int(error.get("n_ctx") or 0)
            )
        else:
            overflow = overflow_error(detail, self.base_url)
        if overflow is not None:
            overflow.mid_answer = False
            return overflow
        return LLMError(f"{self.base_url} returned HTTP {response.status_code}: {detail}")

    def server_key(self) -> str:
        return self.base_url

    async def server_window(self, model: str) -> int | None:
        """The window from `/v1/models` (vLLM `max_model_len`, llama.cpp `meta.n_ctx`, others'
        `context_length`) or llama.cpp's `/props`; cached for WINDOW_TTL_S, None when unknown."""
        key = (self.base_url, model)
        cached = self._windows.get(key)
        if cached is not None and time.monotonic() - cached[0] < WINDOW_TTL_S:
            return cached[1]
        window = await self._models_window(model) or await self._props_window()
        self._windows[key] = (time.monotonic(), window)
        return window

    async def _models_window(self, model: str) -> int | None:
        entry = await self._model_entry(model)
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        for value in (entry.get("max_model_len"), entry.get("context_length"), entry.get("context_window"),
                      meta.get("n_ctx"), meta.get("n_ctx_train")):
            if isinstance(value, int) and value > 0:
                return value
        return None

    async def model_parameters(self, model: str) -> int | None:
        """llama.cpp's `meta.n_params` in `/v1/models` (other servers do not say)."""
        meta = (await self._model_entry(model)).get("meta")
        count = meta.get("n_params") if isinstance(meta, dict) else None
        return count if type(count) is int and count > 0 else None

    async def _model_entry(self, model: str) -> dict:
        """`model`'s entry in `/v1/models` (the only one when there is one), kept WINDOW_TTL_S; {} when
        the server lists no such entry or does not answer (not kept)."""
        key = (self.base_url, model)
        cached = self._entries.get(key)
        if cached is not None and time.monotonic() - cached[0] < WINDOW_TTL_S:
            return cached[1]
        try:
            response = await self._client().get("/models", timeout=5.0)
            entries = response.json().get("data", []) if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            return {}
        entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        ranked = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1 else [])
        entry = ranked[0] if ranked else {}
        self._entries[key] = (time.monotonic(), entry)
        return entry

    async def _props_window(self) -> int | None:
        root = self.base_url.removesuffix("/v1")
        try:
            response = await self._client().get(f"{root}/props", timeout=5.0)
            props = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return None
        settings_ = props.get("default_generation_settings") if isinstance(props, dict) else None
        for value in ((settings_ or {}).get("n_ctx"), (props or {}).get("n_ctx")):
            if isinstance(value, int) and value > 0:
                return value
        return None

    def health_probe(self) -> tuple[str, dict[str, str], str]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return f"{self.base_url}/models", headers, "is the server running? Check OPENAI_BASE_URL and OPENAI_API_KEY."

    async def list_models(self) -> list[str]:
        client = self._client()
        try:
            response = await client.get("/models")
            response.raise_for_status()
        except httpx.ConnectError:
            raise LLMUnreachable(f"cannot reach {self.base_url}") from None
        except httpx.HTTPStatusError as exc:
            raise LLMError(f"{self.base_url}/models returned HTTP {exc.response.status_code}") from None
        return sorted(m.get("id", "") for m in response.json().get("data", []))


def _request_body(
    messages, tools, model: str, temperature: float, max_tokens: int | None, output: OutputSchema | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [_to_openai(m) for m in messages],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": temperature,
    }
    if max_tokens:
        body["max_tokens"] = max_tokens
    if tools:
        body["tools"] = tools
    if output is not None and output.via == "json_schema":  # llama.cpp's own field
        body["json_schema"] = output.schema
    elif output is not None:
        body["response_format"] = {
            "type": "json_schema", "json_schema": {"name": output.name, "strict": True, "schema": output.schema},
        }
    return body


async def _events(response: httpx.Response, state: "_StreamState") -> AsyncIterator[dict]:
    """The JSON objects of an SSE stream, until [DONE] (noted in `state`)."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            state.done = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


@dataclass
class _StreamState:
    """What a stream said so far: tool-call fragments by index, finish reason, usage."""

    pending: dict[int, dict[str, str]] = field(default_factory=dict)
    finish: str = ""
    done: bool = False  # [DONE] arrived
    usage: dict[str, int] = field(default_factory=dict)

    def feed(self, event: dict) -> list[LLMChunk]:
        if event.get("usage"):
            self.usage = event["usage"]
        chunks = []
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            for frag in delta.get("tool_calls") or []:
                self._add_fragment(frag)
            text = delta.get("content") or ""
            reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            if text or reasoning:
                chunks.append(LLMChunk(content=text, thinking=reasoning))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return chunks

    def _add_fragment(self, frag: dict) -> None:
        slot = self.pending.setdefault(frag.get("index", 0), {"id": "", "name": "", "arguments": ""})
        fn = frag.get("function") or {}
        slot["id"] = frag.get("id") or slot["id"]
        slot["name"] = _merge_name(slot["name"], fn.get("name") or "")
        slot["arguments"] += fn.get("arguments") or ""

    def last_chunk(self) -> LLMChunk:
        calls = [
            ToolCall(id=s["id"] or f"call_{i}", name=s["name"], arguments=_parse_args(s["arguments"]))
            for i, s in sorted(self.pending.items())
        ]
        return LLMChunk(
            tool_calls=calls,
            done=True,
            finish_reason="tool_calls" if calls else (self.finish or "stop"),
            prompt_tokens=int(self.usage.get("prompt_tokens") or 0),
            completion_tokens=int(self.usage.get("completion_tokens") or 0),
        )


def _image_mime(b64: str) -> str:
    """The image type from its first bytes (the data URI must name the real type)."""
    import base64
    import binascii

    try:
        head = base64.b64decode(b64[:24] + "=" * (-len(b64[:24]) % 4))
    except (binascii.Error, ValueError):
        return "image/png"
    if head.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"


def _merge_name(current: str, fragment: str) -> str:
    """Tool-call names: OpenAI sends the name once, llama-cpp-python repeats it in every chunk,
    a few servers send it in pieces. A repeated (or growing) name replaces, a piece appends."""
    if not fragment:
        return current
    if not current or fragment.startswith(current):
        return fragment
    return current + fragment


def _parse_args(raw: str) -> Any:
    """Parsed arguments, or the raw string so the registry can report the JSON error."""
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return raw
