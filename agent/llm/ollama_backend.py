"""Ollama backend on the official `ollama` AsyncClient (streaming /api/chat)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

import httpx
import ollama
import pydantic
from django.conf import settings

from agent.messages import ChatMessage, LLMChunk, ToolCall

from . import ndjson
from .base import ClientCache, LLMBackend, LLMError, LLMIncomplete, LLMModelMissing, LLMUnreachable, overflow_error

_ids = itertools.count(1)
_RAW_ARGS = "__navi_raw_arguments__"  # carries string arguments through the client's dict-only model
MODEL_INFO_TTL_S = 600.0


def _to_ollama(msg: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": msg.role, "content": msg.content or ""}
    if msg.images:
        out["images"] = list(msg.images)
    if msg.tool_calls:
        out["tool_calls"] = [{"function": {"name": c.name, "arguments": _history_args(c.arguments)}} for c in msg.tool_calls]
    if msg.role == "tool" and msg.name:
        out["tool_name"] = msg.name
    return out


def _history_args(arguments: Any) -> dict[str, Any]:
    """Ollama takes arguments as an object; a JSON string is parsed. Malformed ones become {}
    here, which is harmless: the tool result that follows tells the model they were invalid."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _normalise_tool_calls(part: dict) -> None:
    """Some Ollama versions send `arguments` as a JSON string, which the client's model rejects
    (ollama/ollama-python#484) and which would end the whole stream. Valid JSON becomes the
    object; anything else is kept as the raw string so the registry reports it to the model."""
    for call in (part.get("message") or {}).get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if args is None:
            fn["arguments"] = {}
        elif isinstance(args, str):
            try:
                parsed = json.loads(args) if args.strip() else {}
            except ValueError:
                parsed = None
            fn["arguments"] = parsed if isinstance(parsed, dict) else {_RAW_ARGS: args}


def _plain_delta(part: dict) -> bool:
    """A mid-stream chunk of text or thinking only (most of a stream), whose fields are what
    the client's model would accept: building and validating that model cost ~8 us a delta."""
    msg = part.get("message")
    return (
        not part.get("done")
        and type(msg) is dict
        and not msg.get("tool_calls")
        and type(msg.get("content") or "") is str
        and type(msg.get("thinking") or "") is str
    )


def _lean_path_fits(messages: list[ChatMessage]) -> bool:
    """The lean reader sends the request as it is: images still need the client's encoding,
    and a configured proxy its transport."""
    if any(m.images for m in messages):
        return False
    return not any(os.environ.get(name) for name in _PROXY_VARIABLES)


_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def _merged(batch: list[bytes]) -> Iterator[LLMChunk]:
    """The chunks of one batch of reply lines, runs of plain deltas of one kind merged; what
    came before an error line is yielded before the error is raised."""
    pending: LLMChunk | None = None
    for line in batch:
        part = _part(line)
        if _plain_delta(part):
            msg = part["message"]
            content, thinking = msg.get("content") or "", msg.get("thinking") or ""
            if pending is not None and ((not thinking and not pending.thinking) or (not content and not pending.content)):
                pending.content += content
                pending.thinking += thinking
                continue
            if pending is not None:
                yield pending
            pending = LLMChunk(content=content, thinking=thinking)
            continue
        if pending is not None:
            yield pending
            pending = None
        if err := part.get("error"):
            raise ollama.ResponseError(err)
        _normalise_tool_calls(part)
        yield OllamaBackend._chunk(ollama.ChatResponse(**part))
    if pending is not None:
        yield pending


def _part(line: bytes) -> dict:
    try:
        part = json.loads(line)
    except ValueError:
        part = None
    if type(part) is not dict:
        raise httpx.RemoteProtocolError(f"Ollama sent a line that is not a JSON object: {line[:80]!r}")
    return part


class _Client(ollama.AsyncClient):
    """The official client, with tool-call arguments normalised before validation (streams)."""

    async def _request(self, cls, *args, stream: bool = False, **kwargs):
        if not stream:
            return await super()._request(cls, *args, stream=False, **kwargs)

        async def inner():
            async with self._client.stream(*args, **kwargs) as r:
                try:
                    r.raise_for_status()
                except httpx.HTTPStatusError as e:
                    await e.response.aread()
                    raise ollama.ResponseError(e.response.text, e.response.status_code) from None
                async for line in r.aiter_lines():
                    part = json.loads(line)
                    if err := part.get("error"):
                        raise ollama.ResponseError(err)
                    if cls is ollama.ChatResponse and _plain_delta(part):
                        yield part  # read as is by OllamaBackend._chunk: no model to validate per delta
                        continue
                    _normalise_tool_calls(part)
                    yield cls(**part)

        return inner()


@dataclass
class ModelInfo:
    """What /api/show says about a model (None: the server did not say)."""

    capabilities: list[str] | None = None
    context_length: int | None = None
    fetched: float = 0.0

    def can(self, capability: str) -> bool:
        return self.capabilities is None or capability in self.capabilities


def _options(info: ModelInfo, temperature: float, max_tokens: int | None) -> dict[str, Any]:
    """num_ctx no larger than the model supports, the output cap as num_predict."""
    options: dict[str, Any] = {"num_ctx": settings.OLLAMA_NUM_CTX, "temperature": temperature}
    if info.context_length:
        options["num_ctx"] = min(settings.OLLAMA_NUM_CTX, info.context_length)
    if max_tokens:
        options["num_predict"] = max_tokens
    return options


class OllamaBackend(LLMBackend):
    name = "ollama"

    def __init__(self, host: str | None = None) -> None:
        self._host = host
        self._clients = ClientCache()
        self._model_info: dict[tuple[str, str], ModelInfo] = {}

    @property
    def host(self) -> str:
        return (self._host or settings.OLLAMA_HOST).rstrip("/")

    def _client(self) -> ollama.AsyncClient:
        timeout = settings.LLM_TIMEOUT_S
        return self._clients.get(
            (self.host, timeout),
            lambda: _Client(host=self.host, timeout=httpx.Timeout(timeout, connect=5.0)),
        )

    async def model_info(self, model: str) -> ModelInfo:
        """Capabilities and context length from /api/show, cached for MODEL_INFO_TTL_S.

        A failure is not cached and means "unknown": the chat call itself reports what is wrong.
        """
        key = (self.host, model)
        info = self._model_info.get(key)
        if info is not None and time.monotonic() - info.fetched < MODEL_INFO_TTL_S:
            return info
        try:
            shown = await self._client().show(model)
        except (ollama.ResponseError, httpx.HTTPError, ConnectionError, pydantic.ValidationError):
            return ModelInfo()
        info = ModelInfo(capabilities=shown.capabilities, fetched=time.monotonic())
        for name, value in (shown.modelinfo or {}).items():
            if name.endswith(".context_length") and isinstance(value, int) and value > 0:
                info.context_length = value
                break
        self._model_info[key] = info
        return info

    async def _stream(
        self,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]] | None,
        *,
        model: str,
        temperature: float,
        think: bool | None,
        max_tokens: int | None,
    ) -> AsyncIterator[LLMChunk]:
        think = settings.OLLAMA_THINK if think is None else think
        async with self._errors(model):
            info = await self.model_info(model)
            request = {
                "model": model,
                "messages": [_to_ollama(m) for m in messages],
                "tools": tools or None,
                "stream": True,
                # Recent Ollama answers 400 to `think` for a model without the capability.
                "think": think if info.can("thinking") else None,
                "options": _options(info, temperature, max_tokens),
                "keep_alive": settings.OLLAMA_KEEP_ALIVE,
            }
            if _lean_path_fits(messages):
                try:
                    async for chunk in self._lean_stream(request):
                        yield chunk
                    return
                except ndjson.Redirected:
                    pass  # nothing was read: the client follows redirects
            stream = await self._client().chat(**request)
            try:
                async for part in stream:
                    yield self._chunk(part)
            finally:
                await stream.aclose()  # closes the HTTP response: generation ends server-side

    async def _lean_stream(self, request: dict[str, Any]) -> AsyncIterator[LLMChunk]:
        """The reply through agent.llm.ndjson: every line one socket read brought is handled at
        once, and consecutive text (or thinking) deltas among them become one chunk."""
        client = self._client()._client
        payload = {k: v for k, v in request.items() if v is not None}
        lines = ndjson.post_lines(
            f"{str(client.base_url).rstrip('/')}/api/chat", payload, dict(client.headers), settings.LLM_TIMEOUT_S
        )
        try:
            async for batch in lines:
                for chunk in _merged(batch):
                    yield chunk
        finally:
            await lines.aclose()  # aborts the connection: generation ends server-side

    @contextlib.asynccontextmanager
    async def _errors(self, model: str):
        """Client and transport failures as LLM errors saying what to do."""
        try:
            yield
        except (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout):
            raise LLMUnreachable(
                f"cannot reach Ollama at {self.host} — is `ollama serve` running? "
                "Set OLLAMA_HOST if it runs elsewhere."
            ) from None
        except ollama.ResponseError as exc:
            raise await self._response_error(exc, model) from None
        except httpx.ReadTimeout:
            raise LLMError(
                f"Ollama at {self.host} sent nothing for {settings.LLM_TIMEOUT_S:g} s (LLM_TIMEOUT_S); "
                "it may be busy with another request or loading the model",
                mid_answer=True,
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise LLMError(
                f"the connection to Ollama at {self.host} dropped mid-answer ({type(exc).__name__})", mid_answer=True
            ) from None
        except pydantic.ValidationError as exc:
            raise LLMError(
                f"Ollama sent a reply the client could not read ({exc.error_count()} problem(s), e.g. "
                f"{exc.errors()[0]['msg']}); try again, or update Ollama"
            ) from None

    async def _response_error(self, exc: ollama.ResponseError, model: str) -> LLMError:
        if exc.status_code == 404:
            return LLMModelMissing(await self._missing_model_message(model))
        overflow = overflow_error(str(exc.error), f"Ollama at {self.host}")
        if overflow is not None:
            return overflow
        if exc.status_code == -1:  # an {"error"} line inside the stream
            return LLMIncomplete(f"Ollama stopped the answer with an error: {exc.error}")
        return LLMError(f"Ollama returned an error: {exc.error} (HTTP {exc.status_code})")

    @staticmethod
    def _chunk(part: Any) -> LLMChunk:
        if type(part) is dict:  # a plain delta (_plain_delta)
            msg = part["message"]
            return LLMChunk(content=msg.get("content") or "", thinking=msg.get("thinking") or "")
        msg = part.message
        calls = []
        for c in msg.tool_calls or []:
            args = dict(c.function.arguments or {})
            if set(args) == {_RAW_ARGS}:
                args = args[_RAW_ARGS]  # malformed JSON: the registry tells the model so
            calls.append(ToolCall(id=f"call_{next(_ids)}", name=c.function.name, arguments=args))
        chunk = LLMChunk(content=msg.content or "", thinking=msg.thinking or "", tool_calls=calls)
        if part.done:
            chunk.done = True
            chunk.finish_reason = "tool_calls" if calls else (part.done_reason or "stop")
            chunk.prompt_tokens = part.prompt_eval_count or 0
            chunk.completion_tokens = part.eval_count or 0
        return chunk

    async def _missing_model_message(self, model: str) -> str:
        try:
            models = await self.list_models()
        except LLMError:
            models = []
        have = ", ".join(models) if models else "none"
        return f"model '{model}' is not available in Ollama at {self.host} (it has: {have}). Run `ollama pull {model}` or change the profile's model."

    async def server_window(self, model: str) -> int | None:
        """What we ask Ollama for: OLLAMA_NUM_CTX, capped at the model's own context_length."""
        length = (await self.model_info(model)).context_length
        return min(settings.OLLAMA_NUM_CTX, length) if length else None

    def health_probe(self) -> tuple[str, dict[str, str], str]:
        return f"{self.host}/api/version", {}, "is `ollama serve` running? Set OLLAMA_HOST if it runs elsewhere."

    async def list_models(self) -> list[str]:
        try:
            listing = await self._client().list()
            return sorted(m.model for m in listing.models if m.model)
        except (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout):
            raise LLMUnreachable(f"cannot reach Ollama at {self.host} — is `ollama serve` running?") from None
        except (ollama.ResponseError, httpx.HTTPError) as exc:
            raise LLMError(f"Ollama at {self.host} did not list its models: {exc}") from None
