"""Built-in tools. Every module in this package that defines `tools(agent) -> list[Tool]`
contributes its tools; `builtin_tools(agent)` collects them all (sorted by module name)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from tools_app.base import Tool

if TYPE_CHECKING:
    from agent.loop import Agent


def builtin_tools(agent: "Agent") -> list[Tool]:
    found: list[Tool] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        factory = getattr(module, "tools", None)
        if callable(factory):
            found.extend(factory(agent))
    return found
