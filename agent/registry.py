"""Composition root (seeds' build_default_registries): tools, backends and the agent, once per process."""

from __future__ import annotations

import threading

from agent import llmcalls
from agent.llm import BackendRegistry, LLMBackend
from agent.llm.ollama_backend import OllamaBackend
from agent.llm.openai_backend import OpenAIBackend
from agent.loop import Agent
from tools_app.registry import ToolRegistry

_lock = threading.Lock()
_agent: Agent | None = None


def build_default_registries() -> Agent:
    from tools_app.builtin import builtin_tools
    from tools_app.loader import fingerprint as user_tool_fingerprint
    from tools_app.loader import load_user_tools

    LLMBackend.observer = llmcalls.observe  # every LLM call is recorded for /debug
    backends = BackendRegistry()
    backends.register(OllamaBackend())
    backends.register(OpenAIBackend())
    tools = ToolRegistry()
    tools.user_tool_loader = load_user_tools
    tools.user_tool_fingerprint = user_tool_fingerprint
    agent = Agent(tools, backends)
    for tool in builtin_tools(agent):
        tools.register(tool, builtin=True)
    tools.reload_user_tools()
    return agent


def get_agent() -> Agent:
    """The process-wide agent (built on first use)."""
    global _agent
    with _lock:
        if _agent is None:
            _agent = build_default_registries()
        return _agent


def reset_agent() -> None:
    """Forget the process-wide agent (tests change settings between cases)."""
    global _agent
    with _lock:
        _agent = None
