"""The process-wide ToolRegistry: the built-in tools listed below plus the user tools.

The agent adds its own tools (spawn_agent, reflect, switch_profile, list_profiles) when it is
built (agent.registry); everything else a model can call is in BUILTIN_TOOLS.
"""

from __future__ import annotations

import threading
from typing import Callable

from tools_app.base import Tool
from tools_app.builtin.code_exec import CodeExecTool
from tools_app.builtin.filesystem import FilesystemTool
from tools_app.builtin.images import ImageViewTool
from tools_app.builtin.memory import MemoryForgetTool, MemorySaveTool, MemorySearchTool
from tools_app.builtin.selfext import (
    DeleteToolTool,
    ListToolsTool,
    ReloadToolsTool,
    TestToolTool,
    ToolManualTool,
    WriteToolTool,
)
from tools_app.builtin.session_files import ContentPublishTool, ShareFileTool
from tools_app.builtin.ssh import SshExecTool
from tools_app.builtin.terminal import TerminalTool
from tools_app.builtin.web import HttpRequestTool, WebSearchTool, WebViewTool
from tools_app.builtin.working_notes import ScratchpadTool, TodoTool
from tools_app.loader import fingerprint, load_user_tools
from tools_app.mcp.tools import MCPProvider
from tools_app.registry import ToolRegistry

# Each entry builds one tool; the self-extension tools get the registry they manage.
BUILTIN_TOOLS: list[Callable[[ToolRegistry], Tool]] = [
    lambda _: CodeExecTool(),
    lambda _: FilesystemTool(),
    lambda _: ImageViewTool(),
    lambda _: MemorySaveTool(),
    lambda _: MemorySearchTool(),
    lambda _: MemoryForgetTool(),
    WriteToolTool,
    ReloadToolsTool,
    ListToolsTool,
    ToolManualTool,
    DeleteToolTool,
    TestToolTool,
    lambda _: ShareFileTool(),
    lambda _: ContentPublishTool(),
    lambda _: SshExecTool(),
    lambda _: TerminalTool(),
    lambda _: WebSearchTool(),
    lambda _: WebViewTool(),
    lambda _: HttpRequestTool(),
    lambda _: TodoTool(),
    lambda _: ScratchpadTool(),
]

# Tools of apps above this one (routines...), added from their AppConfig.ready: this layer
# builds them into every registry without knowing their names.
APP_TOOLS: list[Callable[[ToolRegistry], Tool]] = []

_lock = threading.Lock()
_registry: ToolRegistry | None = None


def register_app_tools(*makers: Callable[[ToolRegistry], Tool]) -> None:
    """Add tools an app provides to the process-wide registry (now, if built, and on every rebuild)."""
    with _lock:
        for make in makers:
            if make not in APP_TOOLS:
                APP_TOOLS.append(make)
                if _registry is not None:
                    _registry.register(make(_registry), builtin=True)


def build_tool_registry() -> ToolRegistry:
    """A registry with every built-in tool; user tools load on its first reload."""
    tools = ToolRegistry()
    tools.user_tool_loader = load_user_tools
    tools.user_tool_fingerprint = fingerprint
    for make in BUILTIN_TOOLS + APP_TOOLS:
        tools.register(make(tools), builtin=True)
    tools.providers.append(MCPProvider(tools))
    return tools


def get_tool_registry() -> ToolRegistry:
    """The process-wide registry (built on first use)."""
    global _registry
    with _lock:
        if _registry is None:
            _registry = build_tool_registry()
        return _registry


def reset_tool_registry() -> None:
    """Forget the process-wide registry (tests change settings between cases)."""
    global _registry
    with _lock:
        _registry = None


def reload_if_built(sender=None, **kwargs) -> None:
    """`user_tools_changed` receiver: a registry already in use loads the new set at once."""
    if _registry is not None:
        _registry.reload_user_tools()
