"""LLM backends behind one small interface: complete, stream_complete, list_models (`base`,
`ollama_backend`, `openai_backend`, `ndjson`); the messages they exchange (`messages`), one-shot
calls (`oneshot`), the record of every call (`llmcalls`), which model a turn asks (`choice`)
and a JSON string decoded as a model writes it (`jsonstring`).
May import agent.models only (the bottom room); every other room may import it."""

from .base import BackendRegistry, LLMBackend, LLMError, LLMModelMissing, LLMUnreachable

__all__ = ["BackendRegistry", "LLMBackend", "LLMError", "LLMModelMissing", "LLMUnreachable"]
