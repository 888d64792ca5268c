"""Context compression: old turns of the LLM context become one summary.

Only the context changes: summarised rows leave the context (`in_context=False`) and one
summary row (role=user, is_summary, not in display) enters it; when the summarised rows held
untrusted content, the summary is wrapped as untrusted data from the same source, so the chat
stays tainted. The display history is never
touched. `CompressionWorker` runs pre-turn and post-turn when the session's token count
reaches OLLAMA_NUM_CTX × CONTEXT_COMPRESSION_THRESHOLD.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings

from agent.frames.events import ContextCompressed
from agent.llm import oneshot
from agent.llm.base import context_window
from agent.llm.messages import ChatMessage
from agent.trust import policy
from agent.turn.workers import Worker, WorkerContext, WorkerResult, post_turn_workers, pre_turn_workers
from sessions_app.transcript import render_transcript

log = logging.getLogger(__name__)

_MAX_SUMMARY_INPUT_CHARS = 12_000
_MAX_ARGS_CHARS = 120
_MAX_RESULT_CHARS = 300
SUMMARY_PREFIX = "[Summary of the earlier conversation]"
SUMMARY_PROMPT = """You compress the earlier part of a conversation between a user and an AI assistant.
Write a concise bullet-point summary ("- " per line) that keeps everything needed to continue:
the user's requests and goals, decisions, facts and names, file paths, commands and their important
results, errors, and open tasks. Leave out small talk. No preamble."""


class CompressionError(Exception):
    """The summary could not be produced; the context is left unchanged."""


@dataclass
class Partition:
    system: list[ChatMessage]
    to_summarize: list[ChatMessage]
    to_keep: list[ChatMessage]


def _starts_turn(msg: ChatMessage, prev: ChatMessage | None) -> bool:
    """A user message starts a turn, unless it follows a tool result: then it is an injected
    image (or a stop in mid-tools), and starting a turn there could split a tool-call group."""
    return msg.role == "user" and not msg.is_summary and not (prev is not None and prev.role == "tool")


def partition(context: list[ChatMessage], keep_recent: int) -> Partition:
    """Split into system messages, old turns (plus earlier summaries) and the last turns."""
    system = [m for m in context if m.role == "system"]
    rest = [m for m in context if m.role != "system"]
    starts = [i for i, m in enumerate(rest) if _starts_turn(m, rest[i - 1] if i else None)]
    if len(starts) <= keep_recent:
        return Partition(system, [], rest)
    cut = starts[-keep_recent] if keep_recent > 0 else len(rest)
    return Partition(system, rest[:cut], rest[cut:])


def format_for_summary(messages: list[ChatMessage]) -> str:
    """Plain text of the old turns; tool calls and results as compact previews."""
    return render_transcript(messages, args_chars=_MAX_ARGS_CHARS, result_chars=_MAX_RESULT_CHARS)


def cap_input(text: str, limit: int = _MAX_SUMMARY_INPUT_CHARS) -> str:
    """Cap at `limit` chars: keep the head (it holds the earlier summary) and the most recent tail."""
    if len(text) <= limit:
        return text
    marker = "\n[…middle of the conversation omitted…]\n"
    head = limit // 3
    tail = limit - head - len(marker)
    return text[:head] + marker + text[-tail:]


async def compress_context(
    context: list[ChatMessage], llm, model: str, temperature: float, keep_recent: int
) -> list[ChatMessage] | None:
    """system + [summary] + kept turns, or None when there is nothing old enough to summarise.

    Raises CompressionError (or the backend's LLMError) when the summary cannot be produced.
    """
    parts = partition(context, keep_recent)
    if not parts.to_summarize:
        return None
    text = cap_input(format_for_summary(parts.to_summarize))
    summary = await oneshot.ask(
        llm, oneshot.prompt(SUMMARY_PROMPT, text), purpose="compression", model=model, temperature=temperature,
        max_tokens=settings.LLM_MAX_SUMMARY_TOKENS,
    )
    if not summary:
        raise CompressionError("the model returned an empty summary")
    # A summary written from untrusted content (a page, an attached resource, or an earlier
    # summary so marked) carries what it read: wrapped like the content itself, so the chat stays
    # tainted (agent.trust.policy.context_taint) and the model keeps reading it as data.
    source = policy.context_taint(parts.to_summarize)
    body = policy.wrap_untrusted(summary, source) if source else summary
    summary_msg = ChatMessage(role="user", content=f"{SUMMARY_PREFIX}\n{body}", is_summary=True)
    return parts.system + [summary_msg] + parts.to_keep


def should_compress(token_count: int, max_tokens: int) -> bool:
    if not settings.CONTEXT_COMPRESSION_ENABLED or max_tokens <= 0:
        return False
    return token_count >= max_tokens * settings.CONTEXT_COMPRESSION_THRESHOLD


class CompressionWorker(Worker):
    """Pre- and post-turn: compress when the token count crossed the threshold."""

    name = "compression"

    def wanted(self, ctx: WorkerContext) -> bool:
        # A server that refused a prompt as too long told us its real window (agent.llm.base).
        max_tokens = min(ctx.max_tokens, context_window(ctx.backend.name, ctx.profile.resolved_model()))
        return should_compress(ctx.token_count, max_tokens) and getattr(ctx.conversation, "persistent", False)

    async def run(self, ctx: WorkerContext) -> WorkerResult:
        conv = ctx.conversation
        model = ctx.profile.resolved_model()
        max_tokens = min(ctx.max_tokens, context_window(ctx.backend.name, model))
        if not should_compress(ctx.token_count, max_tokens) or not getattr(conv, "persistent", False):
            return WorkerResult()
        before = len(conv.context)
        keep = max(1, settings.CONTEXT_KEEP_RECENT)  # never summarise away the turn being answered
        temperature = settings.CONTEXT_SUMMARY_TEMPERATURE
        new_context = await compress_context(conv.context, ctx.backend, model, temperature, keep)
        if new_context is None and ctx.token_count >= max_tokens and keep > 1:
            # Full, yet too few turns to summarise: a few long turns filled the window.
            new_context = await compress_context(conv.context, ctx.backend, model, temperature, 1)
        if new_context is None:
            log.info("compression skipped for %s: at most %d turns in context", conv.id, settings.CONTEXT_KEEP_RECENT)
            return WorkerResult()
        await conv.apply_compression(new_context)
        log.info("compressed the context of %s: %d → %d messages", conv.id, before, len(conv.context))
        return WorkerResult(events=[ContextCompressed(messages_before=before, messages_after=len(conv.context))])


_worker = CompressionWorker()


def register_workers() -> None:
    """Add the compression worker to both trigger points (idempotent)."""
    for registry in (pre_turn_workers, post_turn_workers):
        if not any(isinstance(w, CompressionWorker) for w in registry):
            registry.append(_worker)
