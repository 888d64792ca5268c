"""The backend interface and the errors it raises (each says what to do next)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

from django.conf import settings

from agent.llm.messages import ChatMessage, LLMChunk, LLMResponse
from navi_project import connections
from navi_project.llm_purpose import current_llm_purpose


class LLMError(Exception):
    """An LLM call failed; the message is shown to the owner as is.

    `mid_answer` is true when the call failed after it had started answering (a dropped
    connection, a stream that ended early): the caller decides what that means for its work.
    """

    mid_answer = False
    code = "llm_failed"  # the `code` of the error frame; views map it to an HTTP status

    def __init__(self, message: str, *, mid_answer: bool | None = None) -> None:
        super().__init__(message)
        if mid_answer is not None:
            self.mid_answer = mid_answer


class LLMUnreachable(LLMError):
    """The server could not be reached at all."""

    code = "llm_unreachable"


class LLMModelMissing(LLMError):
    """The server does not have the profile's model."""

    code = "model_missing"


class LLMIncomplete(LLMError):
    """The server ended the answer without saying it was finished (no done line, no finish
    reason, an error object inside an HTTP 200 stream)."""

    mid_answer = True
    code = "llm_incomplete"


class LLMContextOverflow(LLMIncomplete):
    """The prompt did not fit the server's context window."""

    code = "context_overflow"

    def __init__(self, message: str, *, prompt_tokens: int = 0, context_window: int = 0) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.context_window = context_window


class LLMTimeout(LLMError):
    """The call ran past LLM_CALL_MAX_S (total wall-clock time, not a per-read timeout)."""

    mid_answer = True
    code = "llm_timeout"


# "Requested tokens (4327) exceed context window of 4096" (llama-cpp-python),
# "request (2358 tokens) exceeds the available context size (2048 tokens)" (llama-server),
# "the request exceeds the available context size" (llama-server, older), "maximum context length".
_OVERFLOW = re.compile(r"exceeds? (the )?(available )?context|context (window|length|size)", re.IGNORECASE)
_NUMBERS = re.compile(r"\d+")


def overflow_error(detail: str, where: str, prompt_tokens: int = 0, context_window: int = 0) -> LLMContextOverflow | None:
    """An LLMContextOverflow when `detail` says the prompt was too long, else None."""
    if not _OVERFLOW.search(detail or ""):
        return None
    numbers = [int(n) for n in _NUMBERS.findall(detail)]
    if not (prompt_tokens and context_window) and len(numbers) >= 2:
        prompt_tokens, context_window = numbers[0], numbers[1]
    size = f" ({prompt_tokens} tokens for a window of {context_window})" if prompt_tokens and context_window else ""
    return LLMContextOverflow(
        f"the conversation is too long for the model's context window{size} — {where} said: {detail}. "
        "The next message compresses the earlier turns; or start a new session, or give the server a larger "
        "context (OLLAMA_NUM_CTX / the server's context size).",
        prompt_tokens=prompt_tokens,
        context_window=context_window,
    )


# What the servers told us about their context windows ((backend, model) → tokens): a server
# that refused a prompt as too long has a smaller window than OLLAMA_NUM_CTX says.
learned_context_windows: dict[tuple[str, str], int] = {}


def context_window(backend_name: str, model: str) -> int:
    """The context window to budget for: OLLAMA_NUM_CTX, or less if the server said so."""
    learned = learned_context_windows.get((backend_name, model), 0)
    return min(settings.OLLAMA_NUM_CTX, learned) if learned else settings.OLLAMA_NUM_CTX


class _CallDeadline:
    """LLM_CALL_MAX_S of one call with one timer, not one per chunk (that cost ~8 us a delta):
    at the deadline the task awaiting the server is cancelled (TimeoutError); when the deadline
    passed during the caller's work, the next wait fails at once (as asyncio.timeout_at)."""

    def __init__(self, when: float | None) -> None:
        self.when, self.fired, self.waiting = when, False, False
        self.task: asyncio.Task | None = None
        self.handle = asyncio.get_running_loop().call_at(when, self._fire) if when is not None else None

    def _fire(self) -> None:
        self.fired = True
        if self.waiting and self.task is not None:
            self.task.cancel()

    async def wait(self, stream: AsyncIterator[LLMChunk]) -> LLMChunk:
        if self.when is None:
            return await anext(stream)
        if self.fired:
            raise TimeoutError
        self.task, self.waiting = asyncio.current_task(), True
        try:
            return await anext(stream)
        except asyncio.CancelledError:
            if self.fired and self.task.uncancel() == 0:
                raise TimeoutError from None
            raise
        finally:
            self.waiting = False

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()


@dataclass(frozen=True)
class OutputSchema:
    """A JSON schema the server must make the reply follow (agent.toolcalling.schema), and the request
    field it goes in: "format" (Ollama), "response_format" (OpenAI json_schema) or "json_schema"
    (llama.cpp's server)."""

    via: str
    schema: dict
    name: str = "navi_step"


class LLMBackend(ABC):
    name = ""
    # The request fields this backend can carry a JSON schema in, tried in this order.
    schema_ways: tuple[str, ...] = ()
    # Called with a dict after every call (backend, model, purpose, tokens, duration, outcome);
    # set by the composition root (agent.registry). Never allowed to break a call.
    observer: Callable[[dict], Awaitable[None]] | None = None

    async def stream_complete(
        self,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str,
        temperature: float = 0.7,
        think: bool | None = None,
        max_tokens: int | None = None,
        output: OutputSchema | None = None,
    ) -> AsyncIterator[LLMChunk]:
        """Stream one completion of at most `max_tokens` tokens (None: the server's default);
        `output`: a JSON schema the reply must follow.

        The whole call is bounded by LLM_CALL_MAX_S. A stream that ends without its final
        chunk raises LLMIncomplete. Closing the iterator (aclose) closes the HTTP response.
        """
        limit = settings.LLM_CALL_MAX_S
        deadline = _CallDeadline(asyncio.get_running_loop().time() + limit if limit and limit > 0 else None)
        options = {"output": output} if output is not None else {}
        stream = self._stream(
            messages, tools, model=model, temperature=temperature, think=think, max_tokens=max_tokens, **options
        )
        finished = False
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "outcome": "closed"}
        started = time.monotonic()
        try:
            while (chunk := await self._next_chunk(stream, deadline, model)) is not None:
                finished = finished or chunk.done
                if chunk.done:
                    usage.update(prompt_tokens=chunk.prompt_tokens, completion_tokens=chunk.completion_tokens)
                yield chunk
        except Exception:
            usage["outcome"] = "error"
            raise
        finally:
            deadline.cancel()
            await stream.aclose()
            usage["outcome"] = "ok" if finished else usage["outcome"]
            await self._observe(model, usage, started)
        if not finished:
            raise LLMIncomplete(
                f"the {self.name} server ended the answer without finishing it (no final chunk); "
                "it may have run out of context or crashed — see the server's log"
            )

    async def _next_chunk(self, stream: AsyncIterator[LLMChunk], deadline: "_CallDeadline", model: str) -> LLMChunk | None:
        """The next chunk (None at the end) within the call's deadline, which covers awaiting
        the server only, never the caller's work between chunks."""
        try:
            return await deadline.wait(stream)
        except StopAsyncIteration:
            return None
        except LLMContextOverflow as exc:
            if exc.context_window:
                learned_context_windows[(self.name, model)] = exc.context_window
            raise
        except TimeoutError:
            raise LLMTimeout(
                f"the model call took longer than LLM_CALL_MAX_S ({settings.LLM_CALL_MAX_S:g} s) and was stopped; "
                "ask for something shorter, or raise LLM_CALL_MAX_S for slow hardware"
            ) from None

    async def _observe(self, model: str, usage: dict, started: float) -> None:
        observer = LLMBackend.observer
        if observer is None:
            return
        try:
            await observer(dict(usage, backend=self.name, model=model, purpose=current_llm_purpose.get(),
                                duration_ms=int((time.monotonic() - started) * 1000)))
        except Exception:  # bookkeeping never breaks a call
            logging.getLogger(__name__).info("LLM call not recorded", exc_info=True)

    @abstractmethod
    def _stream(
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
        """The backend's own stream; yields a `done` chunk last when the server finished."""

    async def complete(
        self,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str,
        temperature: float = 0.7,
        think: bool | None = None,
        max_tokens: int | None = None,
        output: OutputSchema | None = None,
    ) -> LLMResponse:
        """One completion, collected from the stream."""
        out = LLMResponse()
        stream = self.stream_complete(
            messages, tools, model=model, temperature=temperature, think=think, max_tokens=max_tokens, output=output
        )
        try:
            async for chunk in stream:
                out.content += chunk.content
                out.thinking += chunk.thinking
                out.tool_calls.extend(chunk.tool_calls)
                if chunk.done:
                    out.finish_reason = chunk.finish_reason or "stop"
                    out.prompt_tokens = chunk.prompt_tokens
                    out.completion_tokens = chunk.completion_tokens
        finally:
            await stream.aclose()
        return out

    @abstractmethod
    async def list_models(self) -> list[str]: ...

    async def describe_models(self) -> list[dict]:
        """What the server has, `{"name"}` per model (a backend that knows sizes adds `size`), and
        `"embedding": true` on one that only embeds."""
        return [{"name": name, **({"embedding": True} if embeds_only(name) else {})} for name in await self.list_models()]

    async def server_window(self, model: str) -> int | None:
        """The context window the server runs `model` with, when it says (None otherwise)."""
        return None

    async def model_parameters(self, model: str) -> int | None:
        """How many parameters `model` has, when the server says (None otherwise)."""
        return None

    def server_key(self) -> str:
        """Which server this backend talks to now (what a probe's answer is cached under)."""
        return ""

    def health_probe(self) -> tuple[str, dict[str, str], str]:
        """(URL to GET, headers, what to check when it fails) for /health."""
        raise NotImplementedError


def embeds_only(name: str, families: set[str] = frozenset()) -> bool:
    """A model that turns text into vectors and cannot chat: the configured embedding model, a
    name saying "embed", or a BERT family (all-minilm, bge-m3, nomic-embed-text). Servers list no
    capabilities with their models, so this is read from names."""
    base = name.removesuffix(":latest").lower()
    return (base == connections.embedding_model().removesuffix(":latest").lower() or "embed" in base
            or base.split("/")[-1].startswith(("all-minilm", "bge-", "mxbai-embed", "snowflake-arctic-embed"))
            or any("bert" in f for f in families))


class ClientCache:
    """One HTTP client per event loop and configuration: a new httpx client costs an SSL
    context and a TCP handshake (tens of ms), and clients must not cross event loops."""

    def __init__(self) -> None:
        self._clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, key: tuple, factory: Callable[[], Any]) -> Any:
        per_loop = self._clients.setdefault(asyncio.get_running_loop(), {})
        if key not in per_loop:
            per_loop[key] = factory()
        return per_loop[key]


class BackendRegistry:
    """Backends keyed by `profile.llm_backend`."""

    def __init__(self) -> None:
        self._backends: dict[str, LLMBackend] = {}
        # name -> a backend for an OpenAI-compatible server named in Settings (agent.registry sets it)
        self.make_server: Callable[[str], LLMBackend] | None = None

    def register(self, backend: LLMBackend) -> None:
        self._backends[backend.name] = backend

    def get(self, name: str) -> LLMBackend:
        backend = self._backends.get(name or "ollama")
        if backend is None and self.make_server is not None and connections.server(name) is not None:
            backend = self._backends[name] = self.make_server(name)  # a server the owner added in Settings
        if backend is None:
            known = ", ".join(sorted(self._backends))
            raise LLMError(f"unknown LLM backend '{name}'; set the profile's llm_backend to one of: {known}")
        return backend

