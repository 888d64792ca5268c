"""Ollama backend: /api/chat streamed through the lean reader (agent.llm.ndjson), the official
`ollama` AsyncClient for what the reader does not do (images, a proxy, a redirect, listing).

The client (its pydantic models: ~250 ms) is imported the first time one of those needs it,
not when the server starts: a plain chat never does (bench/README "boot")."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import itertools
import json
import os
import re
import sys
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

import httpx
import orjson
from django.conf import settings

from agent.llm.messages import ChatMessage, LLMChunk, ToolCall
from navi_project import connections
from navi_project.lazy import lazy_module

from . import ndjson
from .base import (
    ClientCache,
    LLMBackend,
    LLMError,
    LLMIncomplete,
    LLMModelMissing,
    LLMUnreachable,
    OutputSchema,
    embeds_only,
    overflow_error,
)

ollama = lazy_module("ollama")
pydantic = lazy_module("pydantic")
_ids = itertools.count(1)
_RAW_ARGS = "__navi_raw_arguments__"  # carries string arguments through the client's dict-only model
MODEL_INFO_TTL_S = 600.0
# Lines of a reply that come faster than this make a "fast" stream (agent.llm.ndjson `_lines`).
# Each line is relayed the moment it comes unless ndjson.TICK_STREAMS streams are fast at once:
# then they are read together on ticks one screen refresh (60 Hz) apart or more. Every frame
# costs a wake-up and a socket write of the process: for many fast streams, ticks cost ~4x less
# CPU per delta (bench/README, issue 58).
FRAME_INTERVAL_S = 0.016


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
    msg = part.get("message")
    calls = msg.get("tool_calls") if type(msg) is dict else None
    for call in calls if type(calls) is list else ():
        fn = call.get("function") if type(call) is dict else None
        if type(fn) is not dict:
            continue  # the reader of the line says what is wrong with it
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


# A line of plain text (or thinking) exactly as Ollama writes it, its text the JSON string in
# group 1. Nothing in a line is allowed but what these say: any other line is read field by field.
_JSON_TEXT = rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_LINE_HEAD = rb'^\{"model":"[^"\\\n]*","created_at":"[^"\\\n]*","message":\{"role":"assistant",'
_CONTENT_LINE = re.compile(_LINE_HEAD + rb'"content":(' + _JSON_TEXT + rb')\},"done":false\}$', re.MULTILINE)
_THINKING_LINE = re.compile(_LINE_HEAD + rb'"content":"","thinking":(' + _JSON_TEXT + rb')\},"done":false\}$', re.MULTILINE)


def _plain_run(batch: list[bytes]) -> LLMChunk | None:
    """A batch of nothing but text deltas (or nothing but thinking ones), as one chunk: a
    regular expression and one JSON array read in C, not a dict per line (~2.7 -> ~0.8 us a
    line on the bench VM). None for any other batch, or a text JSON would not read."""
    thinking = b'"thinking":' in batch[0]
    texts = (_THINKING_LINE if thinking else _CONTENT_LINE).findall(b"\n".join(batch))
    if len(texts) != len(batch):  # each match is one whole line: so every line matched
        return None
    try:
        text = "".join(orjson.loads(b"[" + b",".join(texts) + b"]"))
    except orjson.JSONDecodeError:
        return None
    return LLMChunk(thinking=text) if thinking else LLMChunk(content=text)


def _merged(batch: list[bytes]) -> Iterator[LLMChunk]:
    """The chunks of one batch of reply lines, runs of plain deltas of one kind merged; what
    came before an error line is yielded before the error is raised."""
    if len(batch) > 1 and (run := _plain_run(batch)) is not None:
        yield run
        return
    pending: LLMChunk | None = None
    for line in batch:
        part = _part(line)
        msg = part.get("message")
        # _plain_delta, inline: this runs for every line of every stream
        if (
            type(msg) is dict
            and not part.get("done")
            and not msg.get("tool_calls")
            and type(content := msg.get("content") or "") is str
            and type(thinking := msg.get("thinking") or "") is str
        ):
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
        yield _read_chunk(part)
    if pending is not None:
        yield pending


class UnreadableReply(Exception):
    """A reply line whose fields are not of the types Ollama's API gives them."""


def _read_chunk(part: dict) -> LLMChunk:
    """A line that is not a plain delta (tool calls, the final line), checked field by field
    as the client's model would (without importing it)."""
    msg = part.get("message") or {}
    if type(msg) is not dict:
        raise UnreadableReply("message is not an object")
    content, thinking, raw_calls = msg.get("content") or "", msg.get("thinking") or "", msg.get("tool_calls") or []
    if type(content) is not str or type(thinking) is not str:
        raise UnreadableReply("message content or thinking is not text")
    if type(raw_calls) is not list:
        raise UnreadableReply("tool_calls is not a list")
    calls = []
    for call in raw_calls:
        fn = call.get("function") if type(call) is dict else None
        if type(fn) is not dict or type(fn.get("name")) is not str or type(fn.get("arguments")) is not dict:
            raise UnreadableReply("a tool call has no function name and arguments")
        args = dict(fn["arguments"])
        if set(args) == {_RAW_ARGS}:
            args = args[_RAW_ARGS]  # malformed JSON: the registry tells the model so
        calls.append(ToolCall(id=f"call_{next(_ids)}", name=fn["name"], arguments=args))
    chunk = LLMChunk(content=content, thinking=thinking, tool_calls=calls)
    done = part.get("done")
    if done not in (None, True, False):
        raise UnreadableReply("done is not true or false")
    if done:
        reason, prompt, completion = part.get("done_reason"), part.get("prompt_eval_count"), part.get("eval_count")
        if reason is not None and type(reason) is not str:
            raise UnreadableReply("done_reason is not text")
        if any(v is not None and (type(v) is not int or v < 0) for v in (prompt, completion)):
            raise UnreadableReply("a token count is not a whole number")
        chunk.done = True
        chunk.finish_reason = "tool_calls" if calls else (reason or "stop")
        chunk.prompt_tokens = prompt or 0
        chunk.completion_tokens = completion or 0
    return chunk


def base_url(host: str | None) -> str:
    """OLLAMA_HOST as the official client reads it ("host", "host:port", "[v6]:port", with or
    without scheme and path): the URL both paths talk to."""
    host, port = host or "", 11434
    scheme, _, hostport = host.partition("://")
    if not hostport:
        scheme, hostport = "http", host
    elif scheme == "http":
        port = 80
    elif scheme == "https":
        port = 443
    split = urllib.parse.urlsplit(f"{scheme}://{hostport}")
    name = split.hostname or "127.0.0.1"
    port = split.port or port
    try:
        if isinstance(ipaddress.ip_address(name), ipaddress.IPv6Address):
            name = f"[{name}]"
    except ValueError:
        pass
    path = split.path.strip("/")
    return f"{scheme}://{name}:{port}/{path}" if path else f"{scheme}://{name}:{port}"


def _headers() -> dict[str, str]:
    """What the official client sends: JSON both ways, OLLAMA_API_KEY as a Bearer token."""
    headers = {"content-type": "application/json", "accept": "application/json", "user-agent": "navi"}
    if api_key := os.getenv("OLLAMA_API_KEY"):
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _raised_by(exc: BaseException, module: str, name: str) -> bool:
    """isinstance(exc, module.name), without importing a module that is not loaded (then it
    raised nothing)."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(exc, getattr(loaded, name))


def _part(line: bytes) -> dict:
    """One reply line as a dict. orjson reads a line of a stream in ~1 us where json takes ~3 (it
    was the largest single cost per delta); what orjson refuses, json still gets to read."""
    try:
        part = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            part = json.loads(line)
        except ValueError:
            part = None
    if type(part) is not dict:
        raise httpx.RemoteProtocolError(f"Ollama sent a line that is not a JSON object: {line[:80]!r}")
    return part


@functools.cache
def _client_class() -> type:
    """The official client, with tool-call arguments normalised before validation (streams);
    the class is made (and the client imported) the first time a client is needed."""

    class Client(ollama.AsyncClient):
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

    return Client


@dataclass
class ModelInfo:
    """What /api/show says about a model (None: the server did not say)."""

    capabilities: list[str] | None = None
    context_length: int | None = None
    parameters: int | None = None  # model_info's general.parameter_count
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
    schema_ways = ("format",)

    def __init__(self, host: str | None = None) -> None:
        self._host = host
        self._clients = ClientCache()
        self._model_info: dict[tuple[str, str], ModelInfo] = {}

    @property
    def host(self) -> str:
        return (self._host or connections.ollama_url()).rstrip("/")

    def _client(self):
        """The official AsyncClient (imported on first use)."""
        timeout = settings.LLM_TIMEOUT_S
        return self._clients.get(
            (self.host, timeout),
            lambda: _client_class()(host=self.host, timeout=httpx.Timeout(timeout, connect=5.0)),
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
            capabilities, modelinfo = await self._show(model)
        except Exception as exc:
            if isinstance(exc, (httpx.HTTPError, ConnectionError, ValueError)) or _raised_by(exc, "ollama", "ResponseError") \
                    or _raised_by(exc, "pydantic", "ValidationError"):
                return ModelInfo()
            raise
        info = ModelInfo(capabilities=capabilities, fetched=time.monotonic())
        for name, value in modelinfo.items():
            if name.endswith(".context_length") and isinstance(value, int) and value > 0:
                info.context_length = value
                break
        count = modelinfo.get("general.parameter_count")
        info.parameters = count if type(count) is int and count > 0 else None
        self._model_info[key] = info
        return info

    async def _show(self, model: str) -> tuple[list[str] | None, dict]:
        """(capabilities, modelinfo) from /api/show; ValueError when the reply is not that."""
        if not _lean_path_fits([]):  # a proxy: the client's transport
            shown = await self._client().show(model)
            return shown.capabilities, dict(shown.modelinfo or {})
        shown = await ndjson.post_json(f"{base_url(self.host)}/api/show", {"model": model}, _headers(), settings.LLM_TIMEOUT_S)
        if type(shown) is not dict:
            raise ValueError("/api/show did not answer with an object")
        capabilities, modelinfo = shown.get("capabilities"), shown.get("model_info") or {}
        if capabilities is not None and not (type(capabilities) is list and all(type(c) is str for c in capabilities)):
            raise ValueError("capabilities is not a list of names")
        if type(modelinfo) is not dict:
            raise ValueError("model_info is not an object")
        return capabilities, modelinfo

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
            if output is not None:
                request["format"] = output.schema  # Ollama turns it into a grammar
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
        payload = {k: v for k, v in request.items() if v is not None}
        lines = ndjson.post_lines(
            f"{base_url(self.host)}/api/chat", payload, _headers(), settings.LLM_TIMEOUT_S, pace=FRAME_INTERVAL_S
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
        except Exception as exc:  # not a stop or a close (BaseException): those pass as they are
            mapped = await self._mapped(exc, model)
            if mapped is None:
                raise
            raise mapped from None

    async def _mapped(self, exc: Exception, model: str) -> LLMError | None:
        if isinstance(exc, (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout)):
            return LLMUnreachable(
                f"cannot reach Ollama at {self.host} — is `ollama serve` running? "
                "Set OLLAMA_HOST if it runs elsewhere."
            )
        if _raised_by(exc, "ollama", "ResponseError"):
            return await self._response_error(exc, model)
        if isinstance(exc, httpx.ReadTimeout):
            return LLMError(
                f"Ollama at {self.host} sent nothing for {settings.LLM_TIMEOUT_S:g} s (LLM_TIMEOUT_S); "
                "it may be busy with another request or loading the model",
                mid_answer=True,
            )
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
            return LLMError(
                f"the connection to Ollama at {self.host} dropped mid-answer ({type(exc).__name__})", mid_answer=True
            )
        if isinstance(exc, UnreadableReply):
            return LLMError(f"Ollama sent a reply the client could not read ({exc}); try again, or update Ollama")
        if _raised_by(exc, "pydantic", "ValidationError"):
            return LLMError(
                f"Ollama sent a reply the client could not read ({exc.error_count()} problem(s), e.g. "
                f"{exc.errors()[0]['msg']}); try again, or update Ollama"
            )
        return None

    async def _response_error(self, exc, model: str) -> LLMError:
        """An HTTP error status, or an error line in the stream (ollama.ResponseError)."""
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
        fix = f"Run `ollama pull {model}` or change the profile's model."
        if models:  # the quickest fix: this chat's own model (DESIGN §10)
            fix = ("Pick one of those for this chat (the model menu above the chat, or PATCH /sessions/<id> "
                   f"{{\"model\"}}), run `ollama pull {model}` or change the profile's model.")
        return f"model '{model}' is not available in Ollama at {self.host} (it has: {have}). {fix}"

    def server_key(self) -> str:
        return base_url(self.host)

    async def server_window(self, model: str) -> int | None:
        """What we ask Ollama for: OLLAMA_NUM_CTX, capped at the model's own context_length."""
        length = (await self.model_info(model)).context_length
        return min(settings.OLLAMA_NUM_CTX, length) if length else None

    async def model_parameters(self, model: str) -> int | None:
        return (await self.model_info(model)).parameters

    def health_probe(self) -> tuple[str, dict[str, str], str]:
        return f"{self.host}/api/version", {}, "is `ollama serve` running? Set OLLAMA_HOST if it runs elsewhere."

    async def list_models(self) -> list[str]:
        return [m["name"] for m in await self.describe_models()]

    async def describe_models(self) -> list[dict]:
        """What the server has: `{"name", "size"}` (bytes) per model, by name; `"embedding": true`
        on a model that only embeds (a first run must not pick it to chat with)."""
        try:
            listing = await self._client().list()
            found = [{"name": m.model, "size": m.size, **({"embedding": True} if _embeds_only(m) else {})}
                     for m in listing.models if m.model]
            return sorted(found, key=lambda m: m["name"])
        except (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout):
            raise LLMUnreachable(f"cannot reach Ollama at {self.host} — is `ollama serve` running?") from None
        except (ollama.ResponseError, httpx.HTTPError) as exc:
            raise LLMError(f"Ollama at {self.host} did not list its models: {exc}") from None

    async def pull(self, model: str) -> AsyncIterator[dict]:
        """Ollama's /api/pull progress lines (`status`, `total`, `completed`) as they come; an
        `error` line ends it. Read with no overall deadline: a large model takes minutes."""
        timeout = httpx.Timeout(settings.LLM_TIMEOUT_S, connect=5.0)
        try:
            async with httpx.AsyncClient(timeout=timeout, headers=_headers()) as client:
                async with client.stream("POST", f"{base_url(self.host)}/api/pull", json={"model": model, "stream": True}) as r:
                    if r.status_code in (404, 405, 501):
                        yield {"error": (f"the server at {self.host} cannot pull models (it answered /api/pull with HTTP "
                                         f"{r.status_code}): it is not Ollama itself — an OpenAI-compatible server or a "
                                         "proxy. Pull on the machine that runs Ollama (`ollama pull NAME`), or point "
                                         "Settings → Models and connections at Ollama"), "cause": "cannot_pull"}
                        return
                    if r.status_code != 200:
                        body = (await r.aread()).decode(errors="replace")
                        yield pull_error(_error_text(body) or f"HTTP {r.status_code}", model)
                        return
                    async for line in r.aiter_lines():
                        if line.strip():
                            part = json.loads(line)
                            yield pull_error(part["error"], model) if part.get("error") else part
        except (httpx.ConnectError, httpx.ConnectTimeout):
            yield {"error": f"cannot reach Ollama at {self.host} — is `ollama serve` running?"}
        except (httpx.HTTPError, ValueError) as exc:
            yield {"error": f"the pull from Ollama at {self.host} broke off: {exc}"}


def pull_error(said: str, model: str) -> dict:
    """Ollama's pull error as the cause and what to do: an unknown name, a full disk, or as said."""
    text = str(said)
    lower = text.lower()
    if "file does not exist" in lower or "manifest unknown" in lower or "not found" in lower:
        return {"error": (f"Ollama's library has no model '{model}' (Ollama said: {text}). Check the name and tag "
                          "on ollama.com/library, then try again"), "cause": "unknown_name"}
    if "no space left" in lower or "disk full" in lower or "not enough space" in lower:
        return {"error": (f"the Ollama server's disk is full (Ollama said: {text}). Free space there, or remove a "
                          "model with `ollama rm NAME`, then try again"), "cause": "no_space"}
    return {"error": f"{text}; try again", "cause": "other"}


def _embeds_only(model) -> bool:
    """Ollama lists no capabilities in /api/tags: the configured embedding model, a name saying
    "embed", or a BERT family (all-minilm, bge-m3, nomic-embed-text) is one."""
    families = {f.lower() for f in ((model.details and model.details.families) or [])}
    if model.details and model.details.family:
        families.add(model.details.family.lower())
    return embeds_only(model.model, families)


def _error_text(body: str) -> str:
    try:
        return str(json.loads(body).get("error", ""))
    except (ValueError, AttributeError):
        return body[:200]
