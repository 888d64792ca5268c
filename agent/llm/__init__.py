"""LLM backends behind one small interface: complete, stream_complete, list_models."""

from .base import BackendRegistry, LLMBackend, LLMError, LLMModelMissing, LLMUnreachable

__all__ = ["BackendRegistry", "LLMBackend", "LLMError", "LLMModelMissing", "LLMUnreachable"]
