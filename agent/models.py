"""Agent profiles: identity, tools and behaviour for one domain."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from navi_project import connections


class Profile(models.Model):
    id = models.SlugField(primary_key=True, max_length=64)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    system_prompt = models.TextField(blank=True)
    enabled_tools = models.JSONField(default=list, blank=True)
    # Empty = the owner's default (Settings → default model; .env's OLLAMA_DEFAULT_MODEL or
    # OPENAI_MODEL until one is chosen), resolved by agent.llm.choice before each turn.
    model = models.CharField(
        max_length=200, blank=True,
        help_text="Empty: the owner's default model (Settings → Models and connections; .env's OLLAMA_DEFAULT_MODEL "
                  "until chosen), or the server's first chat model when that default is not installed.",
    )
    temperature = models.FloatField(default=0.7)
    max_iterations = models.PositiveIntegerField(default=50)
    planning_enabled = models.BooleanField(default=False)
    llm_backend = models.CharField(max_length=32, default="ollama")
    scratchpad_sections = models.JSONField(default=list, blank=True)
    # {tool name: "allow" | "ask" | "deny"}; a tool not listed follows agent.trust.policy.DEFAULTS.
    tool_policy = models.JSONField(default=dict, blank=True)

    # --- small models (agent.toolcalling.toolcalls, agent.toolcalling.toolselect) -------------------------------------
    class Planning(models.TextChoices):
        ALWAYS = "always"
        AUTO = "auto"  # skip the planning call for short single-request messages
        NEVER = "never"

    # Used when planning_enabled is on (planning_enabled off = never).
    planning = models.CharField(max_length=8, choices=Planning.choices, default=Planning.AUTO)
    recover_tool_calls = models.BooleanField(
        default=True, help_text="Run tool calls the model wrote as text (<tool_call>, JSON, name(arg=...))."
    )
    repair_arguments = models.BooleanField(
        default=True, help_text="Repair almost-valid tool arguments (lenient JSON, types from the schema)."
    )
    max_tools = models.PositiveIntegerField(
        default=0, help_text="Offer at most this many tools per turn, the most relevant ones (0 = all)."
    )
    compact_schemas = models.BooleanField(
        default=False, help_text="Send tool schemas without descriptions of parameters (fewer tokens)."
    )
    context_window = models.PositiveIntegerField(
        default=0, help_text="Tokens of the model's window when the server does not say (0 = ask the server)."
    )
    class ToolCalling(models.TextChoices):
        NATIVE = "native"  # the server's own tool calls (and text recovery when on)
        CONSTRAINED = "constrained"  # the deciding step is schema-constrained JSON (agent.toolcalling.schema)
        AUTO = "auto"  # constrained when the server supports it, else native

    tool_calling = models.CharField(
        max_length=12, choices=ToolCalling.choices, default=ToolCalling.AUTO,
        help_text="How the model calls tools: native, constrained (JSON schema the server enforces), or auto.",
    )
    # Output cap of one answer call (tokens); 0 = LLM_MAX_ANSWER_TOKENS.
    max_answer_tokens = models.PositiveIntegerField(
        default=0, help_text="Most tokens one answer call may write; 0 uses LLM_MAX_ANSWER_TOKENS."
    )

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    def resolved_model(self) -> str:
        """The profile's own model, else the owner's default on its server (agent.llm.choice
        checks the default against what the server has before a turn)."""
        if self.model:
            return self.model
        return connections.default_model(self.effective_backend())

    def effective_backend(self) -> str:
        """Its llm_backend; a profile on the default server naming no model follows the owner's default's server."""
        return connections.backend_for(self.llm_backend, self.model)

    def answer_token_limit(self) -> int:
        """The profile's own cap, else LLM_MAX_ANSWER_TOKENS; a small model's profile (one that caps
        its tools) at most LLM_MAX_ANSWER_TOKENS_SMALL: it can write thousands of tokens to a
        one-line question."""
        if self.max_answer_tokens:
            return self.max_answer_tokens
        if self.max_tools:
            return min(settings.LLM_MAX_ANSWER_TOKENS, settings.LLM_MAX_ANSWER_TOKENS_SMALL)
        return settings.LLM_MAX_ANSWER_TOKENS

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
            "tool_policy": dict(self.tool_policy or {}),
            "planning": self.planning_mode,
            "recover_tool_calls": self.recover_tool_calls,
            "repair_arguments": self.repair_arguments,
            "max_tools": self.max_tools,
            "compact_schemas": self.compact_schemas,
            "context_window": self.context_window,
            "max_answer_tokens": self.answer_token_limit(),
            "tool_calling": self.tool_calling,
        }

    @property
    def is_small_model(self) -> bool:
        """A small model's profile: one that caps the tools it is offered (`max_tools`). Only such a
        profile runs the repairs of agent/toolcalling/guards (the ledger); a big model's runs none."""
        return self.max_tools > 0

    @property
    def planning_mode(self) -> str:
        """always | auto | never: `planning_enabled` is the switch, `planning` the mode."""
        return self.planning if self.planning_enabled else self.Planning.NEVER


class ToolCallRecord(models.Model):
    """Audit: one row per tool call the model made — who, where, what, the decision, the outcome.
    A pending approval is a row with decision=pending; answering it is a conditional UPDATE, so
    the first answer wins whichever socket, worker or REST client sends it."""

    class Decision(models.TextChoices):
        PENDING = "pending"  # waiting for the owner
        ALLOWED = "allowed"  # the policy allows it
        APPROVED = "approved"  # the owner approved it (or "always in this chat")
        DENIED = "denied"  # the owner declined
        TIMED_OUT = "timed_out"  # nobody answered within APPROVAL_TIMEOUT_S
        CANCELLED = "cancelled"  # the run was stopped while waiting
        REFUSED = "refused"  # the policy says deny, or the user lacks the permission

    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    # The chat session (a sub-agent's calls are recorded under its parent's session).
    session = models.ForeignKey("sessions_app.Session", null=True, blank=True, on_delete=models.SET_NULL)
    run_id = models.CharField(max_length=64, blank=True, db_index=True)
    profile_id = models.CharField(max_length=64, blank=True)
    tool = models.CharField(max_length=100, db_index=True)
    arguments = models.JSONField(default=dict, blank=True)
    is_subagent = models.BooleanField(default=False)
    decision = models.CharField(max_length=16, choices=Decision.choices, db_index=True)
    reason = models.TextField(blank=True)
    approval_id = models.CharField(max_length=64, blank=True, db_index=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    success = models.BooleanField(null=True)
    duration_ms = models.PositiveIntegerField(null=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.tool} ({self.decision})"


class ModelReliability(models.Model):
    """How well a model calls tools: counters per backend and model, shown in the admin and /debug."""

    backend = models.CharField(max_length=32)
    model = models.CharField(max_length=200)
    native_calls = models.PositiveIntegerField(default=0)
    recovered_calls = models.PositiveIntegerField(default=0)  # written as text, run anyway
    repaired_arguments = models.PositiveIntegerField(default=0)
    refused_calls = models.PositiveIntegerField(default=0)  # arguments that could not be repaired
    unknown_tools = models.PositiveIntegerField(default=0)
    broken_loops = models.PositiveIntegerField(default=0)  # the same failing call twice in a row
    repeated_calls = models.PositiveIntegerField(default=0)  # a successful call made again, not run
    constrained_calls = models.PositiveIntegerField(default=0)  # calls chosen in a constrained step
    # Schema-constrained output (agent.toolcalling.support): "" not probed yet, else the way it works
    # ("format", "response_format", "json_schema") or "unsupported".
    constrained_output = models.CharField(max_length=32, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["backend", "model"], name="model_reliability_unique")]
        verbose_name_plural = "model reliability"

    def __str__(self) -> str:
        return f"{self.model} ({self.backend})"


class LLMCall(models.Model):
    """One LLM request: what it was for and what it cost (/debug: calls per user message)."""

    session = models.ForeignKey("sessions_app.Session", null=True, blank=True, on_delete=models.CASCADE)
    run_id = models.CharField(max_length=64, blank=True, db_index=True)
    purpose = models.CharField(max_length=32)  # planning, answer, compression, extraction, title, reflect
    backend = models.CharField(max_length=32)
    model = models.CharField(max_length=200)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    outcome = models.CharField(max_length=16)  # ok, error, closed (stopped or cut by the caller)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "LLM call"


class SessionToolGrant(models.Model):
    """"Always in this chat": the owner approved a tool for the rest of one session."""

    session = models.ForeignKey("sessions_app.Session", on_delete=models.CASCADE, related_name="tool_grants")
    tool = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "tool"], name="session_tool_grant_unique")]

    def __str__(self) -> str:
        return f"{self.tool} in {self.session_id}"
