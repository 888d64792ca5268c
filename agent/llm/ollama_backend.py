"""Ollama backend on the official `ollama` AsyncClient (streaming /api/chat)."""

from __future__ import annotations

import itertools
from typing import Any, AsyncIterator

import httpx
import ollama
import pydantic
from django.conf import settings

from agent.messages import ChatMessage, LLMChunk, ToolCall

from .base import ClientCache, LLMBackend, LLMError, LLMModelMissing, LLMUnreachable

_ids = itertools.count(1)


def _to_ollama(msg: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": msg.role, "content": msg.content or ""}
    if msg.images:
        out["images"] = list(msg.images)
    if msg.tool_calls:
        out["tool_calls"] = [
            {"function": {"name": c.name, "arguments": c.arguments if isinstance(c.arguments, dict) else {}}}
            for c in msg.tool_calls
        ]
    if msg.role == "tool" and msg.name:
        out["tool_name"] = msg.name
    return out


class OllamaBackend(LLMBackend):
    name = "ollama"

    def __init__(self, host: str | None = None) -> None:
        self._host = host
        self._clients = ClientCache()

    @property
    def host(self) -> str:
        return (self._host or settings.OLLAMA_HOST).rstrip("/")

    def _client(self) -> ollama.AsyncClient:
        timeout = settings.LLM_TIMEOUT_S
        return self._clients.get(
            (self.host, timeout),
            lambda: ollama.AsyncClient(host=self.host, timeout=httpx.Timeout(timeout, connect=5.0)),
        )

    async def stream_complete(
        self,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]] | None = None,
        *,
        model: str,
        temperature: float = 0.7,
        think: bool | None = None,
    ) -> AsyncIterator[LLMChunk]:
        client = self._client()
        think = settings.OLLAMA_THINK if think is None else think
        try:
            stream = await client.chat(
                model=model,
                messages=[_to_ollama(m) for m in messages],
                tools=tools or None,
                stream=True,
                think=think,
                options={"num_ctx": settings.OLLAMA_NUM_CTX, "temperature": temperature},
                keep_alive=settings.OLLAMA_KEEP_ALIVE,
            )
            try:
                async for part in stream:
                    yield self._chunk(part)
            finally:
                await stream.aclose()  # closes the HTTP response: generation ends server-side
        except (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout):
            raise LLMUnreachable(
                f"cannot reach Ollama at {self.host} — is `ollama serve` running? "
                "Set OLLAMA_HOST if it runs elsewhere."
            ) from None
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise LLMModelMissing(await self._missing_model_message(model)) from None
            raise LLMError(f"Ollama returned an error: {exc.error} (HTTP {exc.status_code})") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ReadTimeout) as exc:
            raise LLMError(
                f"the connection to Ollama at {self.host} dropped mid-answer ({type(exc).__name__}); "
                "the partial answer was kept — send the message again to retry"
            ) from None
        except pydantic.ValidationError as exc:
            raise LLMError(
                f"Ollama sent a reply the client could not read ({exc.error_count()} problem(s), e.g. "
                f"{exc.errors()[0]['msg']}); try again, or update Ollama"
            ) from None

    @staticmethod
    def _chunk(part: Any) -> LLMChunk:
        msg = part.message
        calls = [
            ToolCall(id=f"call_{next(_ids)}", name=c.function.name, arguments=dict(c.function.arguments or {}))
            for c in (msg.tool_calls or [])
        ]
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

    async def list_models(self) -> list[str]:
        try:
            listing = await self._client().list()
            return sorted(m.model for m in listing.models if m.model)
        except (ConnectionError, httpx.ConnectError):
            raise LLMUnreachable(f"cannot reach Ollama at {self.host} — is `ollama serve` running?") from None
