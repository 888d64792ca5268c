"""One-shot LLM calls: one request, no tools, no thinking, the reply's text. Planning,
compression, reflect, memory extraction and the memory summary all go through `ask`."""

from __future__ import annotations

from typing import Any

from agent.llm import LLMBackend
from agent.messages import ChatMessage
from navi_project.llm_purpose import llm_purpose


def prompt(system: str, user: str) -> list[ChatMessage]:
    """The usual two-message request: instructions, then the material."""
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]


async def ask(
    backend: LLMBackend,
    messages: list[ChatMessage],
    *,
    purpose: str,
    model: str,
    temperature: float,
    max_tokens: int | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """The reply's text (stripped); LLMError when the call fails. `purpose` labels the call
    in the LLM-call log (agent.llmcalls)."""
    with llm_purpose(purpose):
        response = await backend.complete(
            messages, tools, model=model, temperature=temperature, think=False, max_tokens=max_tokens
        )
    return response.content.strip()
