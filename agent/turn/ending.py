"""How a turn ends: with its answer (stream_end, then the post-turn workers) or, out of
tool-calling steps, with a message that says so and how to go on. Either way, and on a stop or a
failure, the turn's last assistant message keeps the repair groups that fired (`meta["guards"]`)."""

from __future__ import annotations

import logging
from typing import AsyncIterator

from agent.context.citations import cited_sources
from agent.context.conversation import Conversation
from agent.frames.events import AgentEvent, CitedStreamEnd, StreamEnd, TextDelta, TurnThinking
from agent.llm.messages import ChatMessage
from agent.toolcalling.guards import ledger
from agent.turn import workers
from agent.turn.setup import Setup
from agent.turn.turns import Turn

log = logging.getLogger(__name__)


async def answer(conv: Conversation, setup: Setup, turn: Turn, is_subagent: bool) -> AsyncIterator[AgentEvent]:
    """A turn without tool calls is the answer (saved with the context's size by
    stream_turn): stream_end, then the post-turn workers."""
    if is_subagent and turn.message.thinking:
        yield TurnThinking(thinking=turn.message.thinking)
    await setup.tracker.flush()  # nothing to write on a plain answer; counted before the run is seen ending
    sources = [] if is_subagent else cited_sources(conv.context, turn.message.content)
    if sources:  # kept with the answer, so the history shows its source chips after a reload
        turn.message.meta = {**turn.message.meta, "sources": sources}
    choice = conv.model_choice
    if choice is not None and choice.wanted and not is_subagent:  # the default stood in for: said with the answer
        turn.message.meta = {**turn.message.meta, "model": choice.model, "model_note": choice.note}
    guards = {} if is_subagent else ledger.tally()  # a sub-agent's count with its parent's turn
    if guards:
        turn.message.meta = {**turn.message.meta, "guards": guards}
    if sources or (choice is not None and choice.wanted and not is_subagent):
        await conv.save_meta(turn.message)
    elif guards:
        await _save_quietly(conv, turn.message)
    if sources:
        yield CitedStreamEnd(turn.message.content, turn.tokens, setup.limit, sources=sources)
    else:
        yield StreamEnd(turn.message.content, turn.tokens, setup.limit)
    if not is_subagent:
        for event in await workers.run_phase(
            workers.post_turn_workers, conv, setup.profile, setup.backend, "post", setup.limit
        ):
            yield event


async def give_up(conv: Conversation, setup: Setup) -> AsyncIterator[AgentEvent]:
    """Out of steps without an answer: the owner is told, and how to let the turn go on."""
    text = (
        f"I stopped after {setup.profile.max_iterations} tool-calling steps (this profile's max_iterations) "
        "without reaching a final answer. Say 'continue' to let me go on, or raise max_iterations "
        "for the profile in the admin."
    )
    guards = ledger.tally()
    await conv.add(ChatMessage(role="assistant", content=text, meta={"guards": guards} if guards else {}))
    yield TextDelta(text)
    yield StreamEnd(text, conv.token_count, setup.limit)


async def keep_guards(conv: Conversation) -> None:
    """A stopped or failed turn: the repair groups that fired kept on its last saved assistant
    message (none saved: nowhere to keep them)."""
    guards = ledger.tally()
    if not guards:
        return
    start = max((i for i, m in enumerate(conv.context) if m.role == "user" and not m.is_summary), default=-1)
    last = next((m for m in reversed(conv.context[start + 1:]) if m.role == "assistant" and m.db_id is not None), None)
    if last is not None:
        last.meta = {**(last.meta or {}), "guards": guards}
        await _save_quietly(conv, last)


async def _save_quietly(conv: Conversation, msg: ChatMessage) -> None:
    """The message's meta saved; a failure is logged, never the turn's (the counts are a measure)."""
    try:
        await conv.save_meta(msg)
    except Exception:
        log.warning("the repair groups that fired were not saved with message %s", msg.db_id, exc_info=True)
