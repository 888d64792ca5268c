"""Agent profiles: identity, tools and behaviour for one domain (seeds' profiles.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


def default_model() -> str:
    return settings.OLLAMA_DEFAULT_MODEL


class Profile(models.Model):
    id = models.SlugField(primary_key=True, max_length=64)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    system_prompt = models.TextField(blank=True)
    enabled_tools = models.JSONField(default=list, blank=True)
    # Empty = OLLAMA_DEFAULT_MODEL (or OPENAI_MODEL for the openai backend) at call time.
    model = models.CharField(max_length=200, blank=True)
    temperature = models.FloatField(default=0.7)
    max_iterations = models.PositiveIntegerField(default=50)
    planning_enabled = models.BooleanField(default=False)
    llm_backend = models.CharField(max_length=32, default="ollama")
    scratchpad_sections = models.JSONField(default=list, blank=True)
    # Output cap of one answer call (tokens); 0 = LLM_MAX_ANSWER_TOKENS.
    max_answer_tokens = models.PositiveIntegerField(
        default=0, help_text="Most tokens one answer call may write; 0 uses LLM_MAX_ANSWER_TOKENS."
    )

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    def resolved_model(self) -> str:
        if self.model:
            return self.model
        if self.llm_backend == "openai":
            return settings.OPENAI_MODEL
        return settings.OLLAMA_DEFAULT_MODEL

    def answer_token_limit(self) -> int:
        return self.max_answer_tokens or settings.LLM_MAX_ANSWER_TOKENS

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "enabled_tools": list(self.enabled_tools),
            "model": self.resolved_model(),
            "temperature": self.temperature,
            "max_iterations": self.max_iterations,
            "planning_enabled": self.planning_enabled,
            "llm_backend": self.llm_backend,
            "scratchpad_sections": list(self.scratchpad_sections),
            "max_answer_tokens": self.answer_token_limit(),
        }
