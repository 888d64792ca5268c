"""Composition root: the LLM backends, the tool registry and the agent, once per process."""

from __future__ import annotations

import threading

from agent.agent_tools import agent_tools
from agent.llm import BackendRegistry, LLMBackend, llmcalls
from agent.llm.ollama_backend import OllamaBackend
from agent.llm.openai_backend import OpenAIBackend
from agent.turn.loop import Agent
from tools_app.toolset import get_tool_registry, reset_tool_registry

_lock = threading.Lock()
_agent: Agent | None = None


def build_default_registries() -> Agent:
    LLMBackend.observer = llmcalls.observe  # every LLM call is recorded for /debug
    backends = BackendRegistry()
    backends.register(OllamaBackend())
    backends.register(OpenAIBackend())
    backends.make_server = lambda name: OpenAIBackend(name=name)  # servers the owner adds in Settings
    tools = get_tool_registry()
    agent = Agent(tools, backends)
    for tool in agent_tools(agent):
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
    """Forget the process-wide agent and its tools (tests change settings between cases)."""
    global _agent
    with _lock:
        _agent = None
        reset_tool_registry()
