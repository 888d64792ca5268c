"""A short chat title from one cheap LLM call after the first answer (a post-turn worker).

Until then — and whenever the call fails — the title is the first line of the first message
(DBConversation sets it). A title the owner set (`title_source="user"`) is never replaced; the
conditional UPDATE also loses against a rename that happens while the model is answering.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings

from agent.frames.events import SessionTitled
from agent.llm import LLMError
from agent.llm.messages import ChatMessage
from agent.turn.workers import Worker, WorkerContext, WorkerResult, post_turn_workers
from navi_project import hotsql
from navi_project.hop import db_hop
from navi_project.llm_purpose import llm_purpose
from sessions_app.models import Session

log = logging.getLogger(__name__)

TITLE_PROMPT = """Give this conversation a short title of 2 to 6 words, in the language of the user.
Answer with the title only: no quotes, no "Title:", no final punctuation."""
MAX_TITLE_CHARS = 60
MAX_REPLY_CHARS = 160  # the reply is cut here: the stream is closed, the model stops generating
# The call's own cap, so the model stops by itself: a title of 60 characters is ~15 tokens. A
# reply that ends there is read to its end and its connection is kept for the next call (a
# stream closed early aborts its connection, and the next call connects anew).
MAX_TITLE_TOKENS = 48
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
        stream = backend.stream_complete(
            messages, None, model=model, temperature=0.2, think=False, max_tokens=MAX_TITLE_TOKENS
        )
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
        """Only in a chat whose title nobody chose when the turn began (the session row loaded
        with it: no query). A rename during the turn still wins: the UPDATE is conditional."""
        conv = ctx.conversation
        return (settings.CHAT_TITLES == "model" and getattr(conv, "persistent", False)
                and getattr(getattr(conv, "session", None), "title_source", "") == "")

    async def run(self, ctx: WorkerContext) -> WorkerResult:
        conv = ctx.conversation
        if not self.wanted(ctx):
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
        updated = await db_hop(_store_title, conv.id, title)
        return WorkerResult(events=[SessionTitled(title=title)] if updated else [])


def _store_title(session_id: str, title: str) -> int:
    """The model's title, unless someone chose one meanwhile (hot-path SQL: after every first answer)."""
    return hotsql.execute(
        f"UPDATE {hotsql.table(Session)} SET title = %s, title_source = %s WHERE id = %s AND title_source = %s",
        [title, "model", hotsql.prep(Session, "id", session_id), ""],
    )


_worker = TitleWorker()


def register_workers() -> None:
    if not any(isinstance(w, TitleWorker) for w in post_turn_workers):
        post_turn_workers.append(_worker)
