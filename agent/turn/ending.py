"""How a turn ends: with its answer (stream_end, then the post-turn workers) or, out of
tool-calling steps, with a message that says so and how to go on."""

from __future__ import annotations

from typing import AsyncIterator

from agent.context.citations import cited_sources
from agent.context.conversation import Conversation
from agent.frames.events import AgentEvent, CitedStreamEnd, StreamEnd, TextDelta, TurnThinking
from agent.llm.messages import ChatMessage
from agent.turn import workers
from agent.turn.setup import Setup
from agent.turn.turns import Turn


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
    if sources or (choice is not None and choice.wanted and not is_subagent):
        await conv.save_meta(turn.message)
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
    await conv.add(ChatMessage(role="assistant", content=text))
    yield TextDelta(text)
    yield StreamEnd(text, conv.token_count, setup.limit)
