"""What a turn offers the model and how its tool calls went, for small models.

`fit_request` picks the tools of one LLM call (BM25 fused with meaning where an embedding model
answers, plus a core set, when the profile caps them), sends them compact when asked or when the
window is tight, and refuses a request that cannot fit the window instead of sending it to overflow. `CallTracker` notices the same failing call
twice in a row (the model is told to answer without it) and counts per-model reliability.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from agent.context import window
from agent.llm.messages import ChatMessage, ToolCall
from agent.toolcalling import reliability, toolmeaning, toolselect
from tools_app.base import ToolResult

MIN_ANSWER_ROOM = 256  # tokens a reply needs at the very least


class DoesNotFit(Exception):
    """The conversation alone is larger than the model's window; the message says what to do."""


@dataclass
class Request:
    tools: list  # the Tool objects offered in this call
    schemas: list[dict[str, Any]] | None
    prompt_tokens: int  # estimate of context + schemas


def fit_request(context: list[ChatMessage], tools: list, profile, limit: int, query: str, keep: set[str],
                meaning: toolmeaning.Meaning | None = None) -> Request:
    """The tools to offer in one call, cut down until the prompt leaves room for an answer
    (`meaning`: agent.toolcalling.toolmeaning's, for a capped profile where an embedding model answered)."""
    room = max(MIN_ANSWER_ROOM, min(profile.answer_token_limit(), limit // 4))
    context_tokens = window.estimate_messages(context)
    chosen = toolselect.select(tools, query, profile.max_tools, keep, meaning)
    attempts = [(chosen, profile.compact_schemas), (chosen, True)]
    core = [t for t in chosen if t.name in toolselect.CORE or t.name in keep]
    attempts += [(core, True), ([], True)]
    for offered, compact in attempts:
        schemas, schema_tokens = _schemas(tuple(offered), compact)
        needed = context_tokens + schema_tokens
        if needed + room <= limit:
            return Request(offered, list(schemas) if schemas else None, needed)
    raise DoesNotFit(
        f"this conversation (about {context_tokens} tokens) no longer fits the model's context window of "
        f"{limit} tokens, even without tools. Start a new chat, or use a model with a larger window "
        "(the profile's context_window, or the server's context size)."
    )


@functools.lru_cache(maxsize=64)
def _schemas(tools: tuple, compact: bool) -> tuple[list[dict[str, Any]], int]:
    """(the tools' schemas, their token estimate): built and measured once per set of Tool
    objects (a reloaded user tool is a new object), not before every call (~0.3 ms of the time
    between "send" and the request)."""
    schemas = toolselect.schemas(list(tools), compact_form=compact)
    return schemas, window.estimate_schemas(schemas or None)


REPEAT_NOTE = (
    "Not run again: you already made this exact {tool} call in this turn and it succeeded (its result "
    "is above). Do not repeat it: answer the user now, or make a different call."
)
LOOP_NOTE = (
    "\nThis exact call has now failed twice in a row. Do not call {tool} again in this turn: answer "
    "the user with what you have, and say what did not work."
)


def _signature(call: ToolCall) -> tuple[str, str]:
    return call.name, json.dumps(call.arguments, sort_keys=True, default=str)


@dataclass
class CallTracker:
    backend: str
    model: str
    used: set[str] = field(default_factory=set)  # tools called this turn (kept on offer)
    banned: set[str] = field(default_factory=set)  # tools taken away after a loop
    counts: dict[str, int] = field(default_factory=dict)
    _last_failure: tuple[str, str] | None = None
    _succeeded: set[tuple[str, str]] = field(default_factory=set)  # this turn's successful calls
    done: list[ToolCall] = field(default_factory=list)  # this turn's successful calls, in order
    left_asks: int = 0  # times a small model was asked again about a part of the request left
    plan: Any = None  # a small model's multi-part request as steps (agent.toolcalling.plan), made at its first step

    def _add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def after(self, call: ToolCall, result: ToolResult) -> str:
        """Count the call; returns a note to append to its result when it is a repeated failure."""
        self.used.add(call.name)
        self._add("constrained_calls" if call.constrained else "recovered_calls" if call.recovered else "native_calls")
        problem = result.metadata.get("problem")
        if problem == "unknown_tool":
            self._add("unknown_tools")
        elif problem == "bad_arguments":
            self._add("refused_calls")
        if result.metadata.get("repaired"):
            self._add("repaired_arguments")
        signature = _signature(call)
        if result.success:
            self._last_failure = None
            self._succeeded.add(signature)
            self.done.append(call)
            return ""
        repeated = signature == self._last_failure
        self._last_failure = signature
        if not repeated:
            return ""
        self._add("broken_loops")
        self.banned.add(call.name)
        return LOOP_NOTE.format(tool=call.name)

    def continue_from(self, other: "CallTracker") -> None:
        """The same turn on another profile (switch_profile): what it called, succeeded at and
        wrote still counts."""
        self.used |= other.used
        self._succeeded |= other._succeeded
        self.done = [*other.done, *self.done]

    def succeeded(self, call: ToolCall) -> bool:
        """This exact call already succeeded in this turn."""
        return _signature(call) in self._succeeded

    def count_repeat(self) -> None:
        self._add("repeated_calls")

    def repeat_note(self, call: ToolCall) -> str:
        """For the same call made again after it succeeded in this turn (a small model's loop,
        which would append or send twice): the result to give instead of running it."""
        if not self.succeeded(call):
            return ""
        self.count_repeat()
        return REPEAT_NOTE.format(tool=call.name)

    def offer(self, tools: list) -> list:
        return [t for t in tools if t.name not in self.banned]

    async def flush(self) -> None:
        counts, self.counts = self.counts, {}
        await reliability.count(self.backend, self.model, **counts)
