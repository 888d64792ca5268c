"""Built-in tools. `builtin_tools(agent)` is the one list of them the registry is built from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tools_app.base import Tool

if TYPE_CHECKING:
    from agent.loop import Agent


def builtin_tools(agent: "Agent") -> list[Tool]:
    from .agents import ListProfilesTool, SpawnAgentTool, SwitchProfileTool
    from .working_notes import ScratchpadTool, TodoTool

    return [
        TodoTool(),
        ScratchpadTool(),
        SwitchProfileTool(),
        ListProfilesTool(),
        SpawnAgentTool(agent),
    ]
