"""`memory_save`, `memory_search`, `memory_forget`: the agent's long-term memory about its user.

Scoped to the run's user (`current_user_id`): one account never sees another's facts.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from memory_app.search import search_facts
from memory_app.services import (
    FactError,
    category_kept_in,
    closest_facts,
    forget_facts,
    kept_key_named,
    kept_with_value,
    refresh_summary,
    upsert_fact,
)
from tools_app import dates
from tools_app.base import Tool, ToolResult
from tools_app.context import current_chat_session_id, current_taint, current_user_id, emit
from tools_app.events import MemorySaved


def _owner() -> int:
    owner = current_user_id.get()
    if owner is None:
        raise RuntimeError("no user for this run: memory tools only work inside a chat run")
    return owner


class MemorySaveTool(Tool):
    name = "memory_save"
    keywords = ("remember save store keep mind memory fact note fyi favourite birthday preference update changed now "
                "later future")
    examples = (
        "remember that my dentist is Dr. Lopez",
        "my daughter's birthday is on the 3rd of May, don't forget it",
        "from now on I prefer answers in French",
        "keep in mind that I'm allergic to peanuts",
        "note for the future: my flat is on the fourth floor",
        "I moved to Lisbon, update that",
        "store my locker number in your memory",
        "keep this in your memory for later: the spare key is with Tom",
        "fyi my partner's name is Sam",
        "my brother's name is Karim, in case I mention him",
        "my sister's name is Lotte, just so you know",
        "my car is a blue Fiat Panda",
        "don't forget: the wifi at my parents' is called Linden",
        "my bank changed, it's now Sparda",
        "work out the total and keep that in mind",
    )
    text_argument = "value"  # what was read or looked up, kept: written from the turn's results
    keeps = True
    # What it keeps from the owner's words alone is what they said (agent.toolcalling.guards.facts).
    as_said = True
    one_call = True

    def text_place(self, arguments: dict[str, Any]) -> str:
        return "your memory"

    async def kept_category(self, arguments: dict[str, Any]) -> str | None:
        """The category the owner already keeps this key in, when the call's is one they have no
        fact in (memory_app.services.category_kept_in): saved there, the fact is updated, not
        kept twice with the old value beside it."""
        owner, category, key = current_user_id.get(), arguments.get("category"), arguments.get("key")
        if owner is None or not isinstance(category, str) or not isinstance(key, str):
            return None
        return await sync_to_async(category_kept_in)(owner, category, key)

    async def named_place(self, request: str) -> tuple[str, str] | None:
        """(category, key) of the one fact already kept whose key the request says
        (memory_app.services.kept_key_named)."""
        owner = current_user_id.get()
        return None if owner is None else await sync_to_async(kept_key_named)(owner, request)

    async def kept_place(self, arguments: dict[str, Any]) -> tuple[str, str] | None:
        """(category, key) of the fact already kept whose value the call's value is, under another
        key (memory_app.services.kept_with_value): the fact the call means to update."""
        owner, value = current_user_id.get(), arguments.get("value")
        if owner is None or not isinstance(value, str):
            return None
        place = await sync_to_async(kept_with_value)(owner, value)
        same = place is not None and (place[0], place[1]) == (arguments.get("category"), arguments.get("key"))
        return None if same else place

    description = (
        "Remember a fact about the user for future sessions (insert or update). Use short lowercase "
        "categories (personal, preferences, projects, environment, people, routines, work) and a short key; "
        "saving an existing category+key replaces its value."
    )
    parameters = {
        "type": "object",
        "properties": {
            "category": {"type": "string", "minLength": 1, "maxLength": 100},
            "key": {"type": "string", "minLength": 1, "maxLength": 200},
            "value": {"type": "string", "minLength": 1, "maxLength": 2000},
        },
        "required": ["category", "key", "value"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:

        session_id = current_chat_session_id.get()
        try:
            saved = await sync_to_async(upsert_fact)(
                _owner(), params["category"], params["key"], dates.pin(params["value"], weekdays=False), source_session_id=session_id,
                untrusted=current_taint.get(),  # the chat read outside content: the fact is kept unverified
            )
        except FactError as exc:
            return ToolResult(False, error=str(exc))
        fact = saved.fact
        if saved.changed:
            await sync_to_async(refresh_summary)(fact.owner_id)  # the summary each run sees
        emit(MemorySaved(category=fact.category, key=fact.key, value=fact.value))
        verb = "Saved" if saved.changed else "Already known"
        note = (" (kept as unverified: this chat read outside content; the user can confirm it on the memory page)"
                if fact.untrusted_source else "")
        return ToolResult(True, f"{verb}: {fact.category}: {fact.key} = {fact.value}{note}")


class MemorySearchTool(Tool):
    name = "memory_search"
    keywords = "recall remember know memory check what my told"
    one_call = True
    examples = (
        "what's my wife's name?",
        "do you remember where I parked?",
        "when is my mother's birthday?",
        "what did I tell you about my allergies?",
        "which bank am I with?",
        "what's my blood type again?",
        "what was the PIN of my bank card again?",
        "tell me my membership number",
        "remind me of my account number",
        "what was the name of my plumber?",
    )
    description = (
        "Search long-term memory facts about the user by keywords (any word matches, best matches first). "
        "Call it when the user mentions something personal or before assuming their preferences or environment."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 15},
        },
        "required": ["query"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:

        facts = await sync_to_async(search_facts)(_owner(), params["query"], int(params.get("limit") or 15))
        if not facts:
            return ToolResult(True, f"No memory facts match {params['query']!r}.")
        lines = [f"- {f.category}: {f.key} = {f.value}{' (unverified)' if f.untrusted_source else ''}" for f in facts]
        unverified = next((f.untrusted_source for f in facts if f.untrusted_source), "")
        # An unverified fact read back is outside content again (tool_step wraps it as such).
        return ToolResult(True, f"{len(facts)} fact(s):\n" + "\n".join(lines),
                          metadata={"untrusted_source": unverified} if unverified else {})


def _forget_closest(owner: int, said: str, category: str | None) -> tuple[list, list]:
    """(deleted, choices): the one fact closest to what the owner asked to forget when no key is
    spelled so (a model writes "gym number" for "gym membership number"), deleted; several as
    close, none deleted and returned to choose from. Never more than one fact goes this way."""
    close = closest_facts(owner, said, category)
    if len(close) != 1:
        return [], close
    close[0].delete()
    return close, []


class MemoryForgetTool(Tool):
    name = "memory_forget"
    keywords = "forget remove delete erase drop memory fact outdated no longer"
    one_call = True
    examples = (
        "forget my old phone number",
        "delete what you know about my ex",
        "that fact about my job is outdated, remove it",
        "erase my address from what you know",
        "remove my shoe size from memory",
        "you can forget my old car, I sold it",
        "drop the note about my old car",
    )
    description = (
        "Delete a fact from long-term memory by its key (optionally only in one category); a key not spelled "
        "exactly forgets the one fact closest to it. Only when the user explicitly asks to forget something or a "
        "stored fact is clearly wrong or outdated."
    )
    parameters = {
        "type": "object",
        "properties": {
            "key": {"type": "string", "minLength": 1},
            "category": {"type": "string"},
        },
        "required": ["key"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:

        owner = _owner()
        deleted = await sync_to_async(forget_facts)(owner, params["key"], params.get("category") or None, guessed_category=True)
        if not deleted:
            deleted, choices = await sync_to_async(_forget_closest)(owner, params["key"], params.get("category") or None)
            if choices:
                listed = "; ".join(f"{f.category}: {f.key}" for f in choices)
                return ToolResult(False, error=f"no fact with key {params['key']!r}, and several come close ({listed}): "
                                               "call memory_forget again with the exact key of the one meant")
        if deleted:
            await sync_to_async(refresh_summary)(owner)  # a forgotten fact leaves the injected summary
        if not deleted:
            where = f" in category {params['category']!r}" if params.get("category") else ""
            return ToolResult(
                False, error=f"no fact with key {params['key']!r}{where}; use memory_search to find the exact key"
            )
        lines = [f"- {f.category}: {f.key}" for f in deleted]
        return ToolResult(True, f"Forgot {len(deleted)} fact(s):\n" + "\n".join(lines))
