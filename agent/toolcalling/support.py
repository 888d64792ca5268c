"""Whether a server enforces JSON schemas, probed once per server and model (`support`): a tiny
request that only a server applying the schema can answer with the probe's value. Ollama takes
the schema in `format`; OpenAI-compatible servers in `response_format` (type `json_schema`), and
llama.cpp's server also in a top-level `json_schema`. The way found (or "unsupported") is cached
and shown with the model's reliability counters; without support the text recovery of
agent.toolcalling.toolcalls stays the fallback.
"""

from __future__ import annotations

import asyncio
import json
import logging

from agent.llm import LLMBackend, LLMError
from agent.llm.base import LLMTimeout, LLMUnreachable, OutputSchema
from agent.llm.messages import ChatMessage
from agent.toolcalling import reliability
from navi_project.llm_purpose import llm_purpose

log = logging.getLogger(__name__)

UNSUPPORTED = "unsupported"
PROBE_TITLE = "navi_probe"
PROBE_VALUE = "navi-7q"


_support: dict[tuple[str, str, str], str] = {}
_locks: dict[tuple[str, str, str], asyncio.Lock] = {}
PROBE_SCHEMA = {
    "title": PROBE_TITLE,
    "type": "object",
    "properties": {"probe": {"type": "string", "enum": [PROBE_VALUE]}},
    "required": ["probe"],
    "additionalProperties": False,
}


def known_support(backend: LLMBackend, model: str) -> str | None:
    """The cached answer of `support` (None: not probed yet)."""
    return _support.get((backend.name, backend.server_key(), model))


def known_way(backend: LLMBackend, model: str) -> str | None:
    """What `support` would return, without awaiting it, once probed (None: not yet)."""
    known = known_support(backend, model)
    return None if known is None else ("" if known == UNSUPPORTED else known)


async def support(backend: LLMBackend, model: str) -> str:
    """How this server takes a schema ("format", "response_format", "json_schema"), or "" when
    it enforces none. Probed once per server and model; a server that cannot be reached is
    asked again next time."""
    key = (backend.name, backend.server_key(), model)
    if key in _support:
        return _support[key] if _support[key] != UNSUPPORTED else ""
    lock = _locks.setdefault(key, asyncio.Lock())
    async with lock:
        if key not in _support:
            found = await _find_way(backend, model)
            if found is None:
                return ""
            _support[key] = found or UNSUPPORTED
            await reliability.note_constrained(backend.name, model, _support[key])
    return _support[key] if _support[key] != UNSUPPORTED else ""


async def _find_way(backend: LLMBackend, model: str) -> str | None:
    """The first way the server enforces the probe's schema; "" for none, None if unknown."""
    for via in backend.schema_ways:
        try:
            works = await _probe(backend, model, via)
        except (LLMUnreachable, LLMTimeout) as exc:
            log.info("constrained output not probed (%s): %s", via, exc)
            return None
        if works:
            log.info("%s/%s enforces JSON schemas through %s", backend.name, model, via)
            return via
    log.info("%s/%s does not enforce JSON schemas: tool calls are read from text", backend.name, model)
    return ""


async def _probe(backend: LLMBackend, model: str, via: str) -> bool:
    messages = [
        ChatMessage(role="system", content="You are a helpful assistant."),
        ChatMessage(role="user", content="Say hello to me."),
    ]
    try:
        with llm_purpose("probe"):
            response = await backend.complete(
                messages, None, model=model, temperature=0.0, think=False, max_tokens=32,
                output=OutputSchema(via, PROBE_SCHEMA, PROBE_TITLE),
            )
    except (LLMUnreachable, LLMTimeout):
        raise
    except LLMError as exc:  # the server refused the field (400) or failed on it
        log.info("constrained output via %s refused: %s", via, exc)
        return False
    try:
        return json.loads(response.content.strip()) == {"probe": PROBE_VALUE}
    except ValueError:
        return False


def forget_support() -> None:
    """Probe again (tests; a server that was upgraded)."""
    _support.clear()
