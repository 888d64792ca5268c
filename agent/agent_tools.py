"""Tools that act on the agent itself: switch_profile, list_profiles, spawn_agent (and reflect,
from agent.turn.reflect). They live in agent/ because they need the agent; tools_app never imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings

from agent.frames.events import ProfileSwitched
from agent.models import Profile
from agent.turn.loop import RunFailed
from agent.turn.reflect import ReflectTool
from sessions_app.models import Session
from tools_app.base import Tool, ToolResult
from tools_app.context import current_chat_session_id, current_session_id, emit

if TYPE_CHECKING:
    from agent.turn.loop import Agent


class SwitchProfileTool(Tool):
    name = "switch_profile"
    keywords = "switch profile change mode"
    # A profile is switched to by name ("the coding profile", "the research agent", "the coder
    # persona"): "my dentist changed, it's now Dr. Haddad" is no switch (the word "change" ranked
    # it first, and a 0.5B model called it with profile_id "Haddad").
    offer_when = "profile profiles mode persona agent assistant"
    examples = (
        "switch to the coding profile",
        "change mode to the server admin assistant",
        "let's continue as the research agent",
    )
    description = (
        "Switch this session to another profile when the conversation's domain clearly changes "
        "(e.g. from research to server administration). Do not switch for one off-topic question "
        "and never switch back and forth. Takes effect on the next model call."
    )
    parameters = {
        "type": "object",
        "properties": {"profile_id": {"type": "string", "description": "id from list_profiles"}},
        "required": ["profile_id"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        profile = await Profile.objects.filter(pk=params["profile_id"]).afirst()
        if profile is None:
            known = [p async for p in Profile.objects.values_list("id", flat=True)]
            return ToolResult(False, error=f"unknown profile '{params['profile_id']}'; available: {', '.join(known)}")
        session_id = current_chat_session_id.get()
        if not session_id or current_session_id.get() != session_id:
            return ToolResult(False, error="switch_profile only works in a chat session, not in a sub-agent")
        await Session.objects.filter(pk=session_id).aupdate(profile=profile)
        emit(ProfileSwitched(profile_id=profile.id, profile_name=profile.name))
        return ToolResult(True, f"Switched to profile '{profile.name}' ({profile.id}).")


class ListProfilesTool(Tool):
    name = "list_profiles"
    keywords = "profiles profile list available agent ids"
    examples = (
        "which profiles are available?",
        "what kinds of assistant can you be?",
        "list the agents I can switch to",
    )
    description = "List the available agent profiles (id, name, what each is for)."
    parameters = {"type": "object", "properties": {}}

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        lines = [f"- {p.id}: {p.name} — {p.description}" async for p in Profile.objects.order_by("id")]
        return ToolResult(True, "\n".join(lines) or "No profiles exist.")


class SpawnAgentTool(Tool):
    name = "spawn_agent"
    keywords = "delegate sub agent subtask parallel helper"
    examples = (
        "delegate researching the three laptops to a helper and compare them",
        "hand this sub-task to a separate agent",
        "get a sub-agent to summarise each chapter in parallel",
    )
    description = (
        "Delegate a self-contained sub-task to an isolated sub-agent and wait for its answer. "
        "Give it a complete task description: it does not see this conversation. It has its own "
        "scratchpad and todo list. Optionally choose its profile."
    )
    parameters = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "the full task for the sub-agent"},
            "profile_id": {"type": "string", "description": "profile for the sub-agent (default: current)"},
        },
        "required": ["task"],
    }
    timeout = 3600.0  # a sub-agent runs a whole loop; Stop still ends it at once

    def __init__(self, agent: "Agent") -> None:
        self.agent = agent

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        profile_id = params.get("profile_id")
        if not profile_id:
            session_id = current_chat_session_id.get()
            profile_id = (
                await Session.objects.filter(pk=session_id).values_list("profile_id", flat=True).afirst()
                if session_id
                else None
            ) or settings.NAVI_DEFAULT_PROFILE
        if not await Profile.objects.filter(pk=profile_id).aexists():
            return ToolResult(False, error=f"unknown profile '{profile_id}'; call list_profiles")
        try:
            answer = await self.agent.run_ephemeral(params["task"], profile_id)
        except RunFailed as exc:
            return ToolResult(False, error=str(exc))
        return ToolResult(True, answer or "(the sub-agent returned no text)")


def agent_tools(agent: "Agent") -> list[Tool]:
    return [SwitchProfileTool(), ListProfilesTool(), SpawnAgentTool(agent), ReflectTool(agent)]
