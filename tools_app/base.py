"""Tool base class and result type."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolResult:
    success: bool
    output: str = ""
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_message_content(self) -> str:
        """What the model reads: the output, and on failure the error with what to do."""
        if self.success:
            return self.output
        parts = [f"ERROR: {self.error or 'tool failed'}"]
        if self.output:
            parts.append(self.output)
        return "\n".join(parts)


class Tool(ABC):
    name: str = ""
    description: str = ""
    # Words a user says when this tool is wanted ("file folder rename ..."): tool selection
    # (agent.toolcalling.toolselect) ranks on them with the name and description; never sent to the model.
    keywords: str = ""
    # A few everyday requests this tool serves, in a user's own words: a capped selection (a
    # small model's profile, `max_tools`) ranks tools by how close the request is in meaning to
    # the description or one of these (agent.toolcalling.toolmeaning); never sent to the model.
    examples: tuple[str, ...] = ()
    # Words one of which the request must say before the word fallback (no embedding model)
    # offers this tool to a capped selection: only for a structural subject a word ranking
    # cannot tell apart (selfext's TOOLS_SUBJECT), never a task's wording. "" = always a candidate.
    offer_when: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    # For a tool with an `action` parameter: the other parameters each action takes ("?" =
    # optional), e.g. {"set": "tasks", "read": ""}. A constrained step (agent.toolcalling.schema) then
    # lets an action be written only with its own arguments; {} = no such rule.
    actions: dict[str, str] = {}
    action_parameter: str = "action"  # the parameter `actions` is keyed on (http_request: "method")
    # The argument that holds a program (code_exec's `code`): a small model's step has it written
    # again as plain code in a call of its own, where a coder model is at its best, instead of
    # inside a JSON string. `code_brief` is what that call is asked ({name} etc.: the arguments).
    code_argument: str = ""
    code_brief: str = ""
    # The program runs as it is and a last bare expression's value is printed (code_exec): a
    # one-expression program that computes from builtins alone is kept, not written again.
    code_runs_as_is: bool = False
    # The argument that holds text written into a file (filesystem's `content`) for the actions
    # `text_actions`: after this turn's tools returned something, a small model's step has it
    # written again in a short call of its own from the request and those results (a 0.5B model
    # wrote the key "timeout" into timeout.txt inside the JSON of the step, the value 45 beside it).
    # Not only files: a scratchpad section's content, a saved fact's value (what was read, kept).
    # No `text_actions` = every call of the tool; `text_place` says where the text goes.
    text_argument: str = ""
    text_actions: tuple[str, ...] = ()
    text_in_file: bool = False  # a file's text (any result informs it; kept line by line) or a short note's
    # The tool keeps what it is given (a list, a note, a fact) and reads no file itself: a small
    # model's call of it before anything ran, for a request that names a file, reads that file
    # first ("turn the chores in chores.txt into to-do items": a 0.5B model filled the list with
    # the catalogue's words).
    keeps: bool = False
    # One call of it is the whole of a request it serves (a fact kept, looked up or forgotten): a
    # small model's request of one part planned to it is answered once that call worked, not
    # followed by calls nobody asked for (agent.toolcalling.plan.Plan.served).
    one_call: bool = False
    # The argument that names another tool (tool_manual's `name`): a small model's step may write
    # only the name of a tool the profile has there (a 0.5B model wrote the tool's description).
    tool_name_argument: str = ""
    # Seconds before the call is abandoned; None = TOOL_TIMEOUT_S. Tools that wait on other
    # long work (spawn_agent) raise it.
    timeout: float | None = None
    # The policy when the profile sets none: None = the agent's default for the call (agent.trust.policy);
    # "ask" for tools of outside servers (MCP) until the owner allows them.
    default_policy: str | None = None
    # Results come from outside Navi (an MCP server): the agent marks them untrusted like a web
    # page, naming `origin`, and later risky calls of the run ask first.
    untrusted_output: bool = False
    origin: str = ""

    def text_place(self, arguments: dict[str, Any]) -> str:
        """Where a call's `text_argument` goes, as the short call that writes it is told."""
        return str(arguments.get("path") or "the file")

    def unasked_actions(self, request: str) -> frozenset[str]:
        """Actions that change something elsewhere which `request` never asks for: a small model's
        step is not offered them (none by default)."""
        return frozenset()

    def kept_text(self, arguments: dict[str, Any]) -> str:
        """What a call of a tool that `keeps` would keep, as text."""
        value = arguments.get(self.text_argument) if self.text_argument else None
        return value if isinstance(value, str) else ""

    def with_kept_text(self, arguments: dict[str, Any], text: str) -> dict[str, Any]:
        """The call's arguments with `text` where `kept_text` came from."""
        return {**arguments, self.text_argument: text}

    def takes_text(self, arguments: dict[str, Any]) -> bool:
        """The call writes its `text_argument` somewhere (`text_actions`; none = every call)."""
        if not self.text_argument:
            return False
        return not self.text_actions or arguments.get(self.action_parameter) in self.text_actions

    def usable(self) -> bool:
        """False when every call could only fail here and now (ssh_exec with no SSH host
        configured): a small model's step is not offered the tool (it called ssh_exec on an
        invented 192.168.1.100 for "write 'server is up' into the scratchpad")."""
        return True

    def approval_reason(self, arguments: Any) -> str:
        """A reason to ask the owner before this call whatever the policy says ("" = follow it)."""
        return ""

    @abstractmethod
    async def execute(self, params: dict[str, Any]) -> ToolResult: ...

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters or {"type": "object", "properties": {}},
            },
        }
