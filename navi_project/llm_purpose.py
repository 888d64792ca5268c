"""What an LLM call is for (planning, answer, compression, extraction, title, reflect): set by
whoever makes the call, read when the call is recorded (agent.llm.llmcalls). Shared by the apps
that call LLMs, so none of them has to import the agent to say it."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

current_llm_purpose: ContextVar[str] = ContextVar("current_llm_purpose", default="answer")


@contextmanager
def llm_purpose(purpose: str) -> Iterator[None]:
    token = current_llm_purpose.set(purpose)
    try:
        yield
    finally:
        current_llm_purpose.reset(token)
