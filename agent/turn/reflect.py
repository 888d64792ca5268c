"""reflect: a separate LLM call that reviews the session's recent work and says what to do next.

Useful after several tool steps or a failure: a fresh look at the transcript (no tools, no
thinking) often spots the missing piece. Sub-agents have no stored session, so it is not
available to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings

from agent.context.conversation import DBConversation
from agent.llm import LLMError, oneshot
from agent.llm.choice import choose_model
from agent.models import Profile
from sessions_app.transcript import render_transcript
from tools_app.base import Tool, ToolResult
from tools_app.context import current_chat_session_id, current_session_id

if TYPE_CHECKING:
    from agent.turn.loop import Agent

RECENT_MESSAGES = 40
MAX_CHARS_PER_MESSAGE = 1200

REFLECT_PROMPT = """You are reviewing the work of an AI assistant part-way through a task.
Read the transcript and answer in three short sections:
## What went well
## What is missing or went wrong
## Next steps
Next steps must be concrete actions (which tool, with what input), most important first.
Be brief and specific; do not redo the work yourself."""


def transcript(messages: list) -> str:
    """The recent context as plain text for the reviewer."""
    return render_transcript(messages[-RECENT_MESSAGES:], text_chars=MAX_CHARS_PER_MESSAGE, result_chars=MAX_CHARS_PER_MESSAGE)


class ReflectTool(Tool):
    name = "reflect"
    keywords = "reflect review stuck progress step back"
    examples = (
        "step back and review what we've done so far",
        "we seem stuck, rethink the approach",
        "what is missing before we can finish?",
    )
    description = (
        "Step back and review progress so far: a fresh look at this session's recent work that "
        "returns what went well, what is missing, and the next concrete steps. Use it when stuck, "
        "after a failure, or before giving a final answer to a long task."
    )
    parameters = {
        "type": "object",
        "properties": {"focus": {"type": "string", "description": "optional: what to pay attention to"}},
    }
    timeout = 300.0  # a full LLM call on a local model can be slow

    def __init__(self, agent: "Agent") -> None:
        self.agent = agent

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        session_id = current_chat_session_id.get()
        if not session_id or current_session_id.get() != session_id:
            return ToolResult(False, error="reflect is not available in a sub-agent (it has no stored session); review your own steps instead")
        conv = await DBConversation.open(session_id)
        text = transcript(conv.context)
        if not text:
            return ToolResult(False, error="there is nothing to review yet; do some work first")
        profile = await Profile.objects.filter(pk=conv.profile_id).afirst()
        if profile is None:
            return ToolResult(False, error="this session's profile no longer exists; switch_profile to another one")
        focus = (params.get("focus") or "").strip()
        request = f"Transcript (most recent last):\n{text}"
        if focus:
            request += f"\n\nFocus of this review: {focus}"
        try:
            choice = await choose_model(self.agent.backends, profile, conv.session.model)
            review = await oneshot.ask(
                self.agent.backends.get(choice.backend), oneshot.prompt(REFLECT_PROMPT, request), purpose="reflect",
                model=choice.model,
                temperature=0.3, max_tokens=settings.LLM_MAX_SUMMARY_TOKENS,
            )
        except LLMError as exc:
            return ToolResult(False, error=f"the review call failed: {exc}")
        if not review:
            return ToolResult(False, error="the review came back empty; continue with your own judgement")
        return ToolResult(True, review)
