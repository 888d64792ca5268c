"""A short chat title from one cheap LLM call after the first answer (a post-turn worker).

Until then — and whenever the call fails — the title is the first line of the first message
(DBConversation sets it). A title the owner set (`title_source="user"`) is never replaced; the
conditional UPDATE also loses against a rename that happens while the model is answering.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings

from agent.events import SessionTitled
from agent.llm import LLMError
from agent.messages import ChatMessage
from agent.workers import Worker, WorkerContext, WorkerResult, post_turn_workers
from navi_project.llm_purpose import llm_purpose
from sessions_app.models import Session

log = logging.getLogger(__name__)

TITLE_PROMPT = """Give this conversation a short title of 2 to 6 words, in the language of the user.
Answer with the title only: no quotes, no "Title:", no final punctuation."""
MAX_TITLE_CHARS = 60
MAX_REPLY_CHARS = 160  # the reply is cut here: the stream is closed, the model stops generating
_INPUT_CHARS = 800


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clean_title(reply: str) -> str:
    """The first non-empty line, without quotes, markdown, a "Title:" label or end punctuation."""
    line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
    line = re.sub(r"^(#+|\*+|title\s*:)\s*", "", line, flags=re.IGNORECASE).strip()
    line = line.strip("\"'`*_“”‘’«» ").rstrip(".!?:;,").strip()
    line = " ".join(line.split())
    if len(line) > MAX_TITLE_CHARS:
        line = line[:MAX_TITLE_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return line


async def ask_for_title(backend, model: str, user_text: str, answer: str) -> str:
    """The model's title for the exchange, or "" when it fails."""
    conversation = f"User: {_clip(user_text, _INPUT_CHARS)}\nAssistant: {_clip(answer, _INPUT_CHARS)}"
    messages = [ChatMessage(role="system", content=TITLE_PROMPT), ChatMessage(role="user", content=conversation)]
    reply = ""
    with llm_purpose("title"):
        stream = backend.stream_complete(messages, None, model=model, temperature=0.2, think=False)
        try:
            async for chunk in stream:
                reply += chunk.content
                if len(reply) >= MAX_REPLY_CHARS or "\n" in reply.strip():
                    break  # enough for a title: closing the stream ends the generation
        except LLMError as exc:
            log.info("no generated title: %s", exc)
            return ""
        finally:
            await stream.aclose()
    return clean_title(reply)


class TitleWorker(Worker):
    """After an answer in a chat whose title nobody chose yet: ask the model for one."""

    name = "title"

    def wanted(self, ctx: WorkerContext) -> bool:
        return settings.CHAT_TITLES == "model" and getattr(ctx.conversation, "persistent", False)

    async def run(self, ctx: WorkerContext) -> WorkerResult:
        conv = ctx.conversation
        if settings.CHAT_TITLES != "model" or not getattr(conv, "persistent", False):
            return WorkerResult()
        source = await Session.objects.filter(pk=conv.id).values_list("title_source", flat=True).afirst()
        if source != "":
            return WorkerResult()
        first = next((m for m in conv.context if m.role == "user" and not m.is_summary), None)
        answer = next((m for m in reversed(conv.context) if m.role == "assistant" and m.content), None)
        if first is None or answer is None:
            return WorkerResult()
        title = await ask_for_title(
            ctx.backend, ctx.profile.resolved_model(), first.content or "[an image]", answer.content
        )
        if not title:
            return WorkerResult()
        updated = await Session.objects.filter(pk=conv.id, title_source="").aupdate(title=title, title_source="model")
        return WorkerResult(events=[SessionTitled(title=title)] if updated else [])


_worker = TitleWorker()


def register_workers() -> None:
    if not any(isinstance(w, TitleWorker) for w in post_turn_workers):
        post_turn_workers.append(_worker)
