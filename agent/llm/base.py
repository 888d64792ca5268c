"""The backend interface and the errors it raises (each says what to do next)."""

from __future__ import annotations

import asyncio
import weakref
from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, Callable

from agent.messages import ChatMessage, LLMChunk, LLMResponse


class LLMError(Exception):
    """An LLM call failed; the message is shown to the owner as is."""


class LLMUnreachable(LLMError):
    pass


class LLMModelMissing(LLMError):
    pass


class LLMBackend(ABC):
    name = ""

    @abstractmethod
    def stream_complete(
        self,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str,
        temperature: float = 0.7,
        think: bool | None = None,
    ) -> AsyncIterator[LLMChunk]:
        """Stream one completion. Closing the iterator (aclose) closes the HTTP response."""

    async def complete(
        self,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str,
        temperature: float = 0.7,
        think: bool | None = None,
    ) -> LLMResponse:
        """One completion, collected from the stream."""
        out = LLMResponse()
        stream = self.stream_complete(messages, tools, model=model, temperature=temperature, think=think)
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

    def register(self, backend: LLMBackend) -> None:
        self._backends[backend.name] = backend

    def get(self, name: str) -> LLMBackend:
        backend = self._backends.get(name or "ollama")
        if backend is None:
            known = ", ".join(sorted(self._backends))
            raise LLMError(f"unknown LLM backend '{name}'; set the profile's llm_backend to one of: {known}")
        return backend

    def names(self) -> list[str]:
        return sorted(self._backends)
