"""What a turn uses of the profile in force (`Setup`): the backend, the tools offered, the
window, the call tracker, and how the server takes a schema when steps are constrained.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings

from agent.context.window import effective_window, estimate_text
from agent.llm import LLMBackend, LLMError
from agent.models import Profile
from agent.toolcalling import offering, prompts, support, toolmeaning
from agent.toolcalling.calls import CallTracker
from agent.toolcalling.guards import ledger
from agent.turn.stopping import until_stopped
from tools_app.base import Tool
from tools_app.context import current_stop_event

log = logging.getLogger(__name__)


@dataclass
class Setup:
    """What the loop uses of the profile in force (switch_profile may change it mid-run)."""

    profile: Profile
    backend: LLMBackend
    tools: list[Tool]
    limit: int  # the context window
    tracker: CallTracker
    constrained: str = ""  # how the server takes a schema when steps are constrained (agent.toolcalling.support)
    catalogue: str = ""  # the tools as the system prompt lists them for constrained steps (all tools offered)
    step_tools: list = field(default_factory=list)  # the tools of the last constrained step, sent as the template shows them
    # A call as the model wrote it → its arguments with the program written again (write_code):
    # the same call chosen again is then seen as the repeat it is, and costs no second rewrite.
    rewritten: dict[str, dict] = field(default_factory=dict)
    meanings: dict[tuple, toolmeaning.Meaning | None] = field(default_factory=dict)
    # The repair groups that run for this profile (agent.toolcalling.guards.ledger): none for a big model's.
    guards: frozenset[str] = frozenset()

    async def meaning(self, tools: list, query: str) -> toolmeaning.Meaning | None:
        """How close the request is to `tools` in meaning (offering.meaning: a capped profile
        only), asked once per turn and set of tools: the planning call and the answer call of a
        turn offer the same tools (one prompt prefix for the server's cache) even when the tools'
        vectors were finished between them; a stop ends the wait."""
        key = (query, tuple(t.name for t in tools))
        if key not in self.meanings:
            cap = self.profile.max_tools
            self.meanings[key] = await until_stopped(offering.meaning(tools, query, cap), current_stop_event.get()) if cap > 0 else None
        return self.meanings[key]


CATALOGUE_SHARE = 4  # the catalogue takes at most this fraction of the window


async def make_setup(profile: Profile, backend: LLMBackend, tools: list[Tool], limit: int = 0) -> Setup:
    """What the turn's calls use of `profile` offering `tools`: the window, a call tracker, and
    how the server takes a schema when the steps are constrained (probed once per server and model)."""
    await fit_to_model(profile, backend)
    limit = limit or await effective_window(backend, profile)
    model = profile.resolved_model()
    setup = Setup(profile, backend, tools, limit, CallTracker(backend.name, model), guards=ledger.active(profile))
    if tools and profile.tool_calling != Profile.ToolCalling.NATIVE:
        setup.constrained = support.known_way(backend, model)  # probed once per server and model
        if setup.constrained is None:
            setup.constrained = await until_stopped(support.support(backend, model), current_stop_event.get())
        if not setup.constrained and profile.tool_calling == Profile.ToolCalling.CONSTRAINED:
            log.warning("profile %s asks for constrained tool calls, but %s/%s enforces no JSON schema: "
                        "tool calls are read from text", profile.id, backend.name, model)
        # Every tool offered: one catalogue in the system prompt, the same in every chat (a
        # cached prefix). A profile that caps its tools (a small model's) sends each step's
        # few tools the way the chat template shows them instead.
        setup.catalogue = prompts.catalogue(tools) if setup.constrained and not profile.max_tools else ""
        if estimate_text(setup.catalogue) > limit // CATALOGUE_SHARE:
            # A small window: the catalogue would crowd the chat out of it (a 1500-token window
            # could not take "hi"). The step's tools go as fit_request cuts them down instead.
            setup.catalogue = ""
    return setup


async def fit_to_model(profile: Profile, backend: LLMBackend) -> None:
    """A profile that caps no tools (`max_tools` 0: the default one, as installed) on a model its
    server says is small (at most SMALL_MODEL_MAX_PARAMS parameters) runs this turn as a small
    model's profile: offered its SMALL_MODEL_MAX_TOOLS best tools, with the small-model repairs
    and the short answers that go with them. Shown every tool, Qwen2.5-Coder-0.5B called
    knowledge_search for "What is the capital of France?" and then put "And Italy?" on the to-do
    list (bench/README, issue 57). `profile` is the turn's own copy: nothing is saved. A native
    profile keeps every tool (its tools go in the template's system prompt, the same bytes each
    turn); a server that does not say the size changes nothing."""
    if profile.max_tools or profile.tool_calling == Profile.ToolCalling.NATIVE or not settings.SMALL_MODEL_MAX_TOOLS:
        return
    try:
        count = await backend.model_parameters(profile.resolved_model())
    except LLMError:  # the turn's own call says what is wrong with the server
        return
    if count is not None and count <= settings.SMALL_MODEL_MAX_PARAMS:
        profile.max_tools = settings.SMALL_MODEL_MAX_TOOLS
