"""The context window a turn really has, and token estimates when the server reports none.

The window is the server's: Ollama's `num_ctx` (OLLAMA_NUM_CTX capped at the model's length,
from /api/show), an OpenAI-compatible server's `/v1/models` or `/props`, else the profile's
`context_window`, else OLLAMA_NUM_CTX — and never more than a server said when it refused a
prompt as too long (agent.llm.base.learned_context_windows).
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings

from agent.llm.base import LLMBackend, learned_context_windows
from agent.llm.messages import ChatMessage

CHARS_PER_TOKEN = 3.5  # a rough mean for English text and JSON with BPE tokenizers


async def effective_window(backend: LLMBackend, profile) -> int:
    model = profile.resolved_model()
    try:
        server = await backend.server_window(model)
    except Exception:  # a probe that fails must not fail the turn
        server = None
    window = server or profile.context_window or settings.OLLAMA_NUM_CTX
    learned = learned_context_windows.get((backend.name, model))
    return min(window, learned) if learned else window


def estimate_text(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def estimate_messages(messages: list[ChatMessage]) -> int:
    """Tokens of a prompt, roughly: content, calls and a few tokens of template per message."""
    total = 0
    for message in messages:
        total += 4 + estimate_text(message.content) + estimate_text(message.thinking)
        if message.tool_calls:
            total += estimate_text(json.dumps([c.as_dict() for c in message.tool_calls], ensure_ascii=False))
        total += 256 * len(message.images)
    return total


def estimate_schemas(schemas: list[dict[str, Any]] | None) -> int:
    return estimate_text(json.dumps(schemas, ensure_ascii=False)) if schemas else 0
