"""One-shot LLM calls: one request, no thinking, one reply. Compression, reflect, memory
extraction and the memory summary go through `ask` (the reply's text); planning through `call`
(the whole response: it must see whether the model called a tool or ran out of room). Titles
stream instead, to stop at the first line."""

from __future__ import annotations

from typing import Any

from agent.llm import LLMBackend
from agent.llm.messages import ChatMessage, LLMResponse
from navi_project.llm_purpose import llm_purpose


def prompt(system: str, user: str) -> list[ChatMessage]:
    """The usual two-message request: instructions, then the material."""
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]


async def call(
    backend: LLMBackend,
    messages: list[ChatMessage],
    *,
    purpose: str,
    model: str,
    temperature: float,
    max_tokens: int | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> LLMResponse:
    """The whole response; LLMError when the call fails. `purpose` labels the call in the
    LLM-call log (agent.llm.llmcalls)."""
    with llm_purpose(purpose):
        return await backend.complete(
            messages, tools, model=model, temperature=temperature, think=False, max_tokens=max_tokens
        )


async def ask(backend: LLMBackend, messages: list[ChatMessage], **options: Any) -> str:
    """The reply's text (stripped); the options of `call`."""
    return (await call(backend, messages, **options)).content.strip()
