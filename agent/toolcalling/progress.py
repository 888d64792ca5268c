"""What a request still asks for after this turn's calls (`what_is_left`): the files it names
that no call touched, the files only read that it asks to change, and the tools of its other
parts that did not run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from agent.llm.messages import ToolCall
from agent.toolcalling import toolmeaning, toolselect

# A part of a request is left for its best tool by words only when that tool is among the part's
# CONFIRM closest in meaning (all-MiniLM-L6-v2 on the tuning wordings: no tool named for a part
# such as "port set to 8080" or "List it", the todo and scratchpad parts still named).
CONFIRM = 3


@dataclass
class Left:
    """What a request still asks for after this turn's calls: the files it names that no call
    touched yet, and the tools whose subject it names that did not run."""

    files: list[str]
    tools: list
    to_change: list[str] = field(default_factory=list)  # files only read that the request asks to change

    def __bool__(self) -> bool:
        return bool(self.files or self.tools or self.to_change)

    def say(self) -> str:
        parts = [f"{name} (nothing done with it yet)" for name in self.files]
        parts += [f"{name} (read, not changed yet: write it with the change)" for name in self.to_change]
        parts += [f"{tool.name} (not used yet)" for tool in self.tools]
        return "; ".join(parts)


# A request that asks to change a file's text ("change 12 May to 19 May in invite.txt", "replace
# … with …", "correct the date in …"): a read of that file does not do it. What the verbs mean.
_CHANGE = re.compile(r"\b(?:change|replace|edit|correct|fix|swap|update)\b", re.I)


def _only_read(name: str, done: list[ToolCall]) -> bool:
    """`name` was touched by this turn's calls, by reads only."""
    touching = [c for c in done if isinstance(c.arguments, dict)
                and str(c.arguments.get("path") or "").rsplit("/", 1)[-1].lower() == name.rsplit("/", 1)[-1].lower()]
    return bool(touching) and all(c.arguments.get("action") == "read" for c in touching)


# A part that asks for a value worked out ("work out the area of …", "how many minutes are in 3.5
# hours", "each person's share"): what the verbs and questions of reckoning mean.
_RECKONS = re.compile(r"\b(?:work(?:s|ed)? out|calculate|compute|how (?:many|much)|add(?:s|ed)? up|convert|"
                      r"divide|multiply|average|split)\b", re.I)
# A number to work it out from: digits, or a number said in words ("Three of us shared …").
_NUMBER = re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|"
                     r"fifty|hundred|thousand|million|half|dozen|twice|double|triple)\b", re.I)


def computes(part: str, tools: list, scores: dict[str, float] | None, before: str = "") -> bool:
    """Whether the part asks for a value worked out, for the program tool (code_exec) to compute:
    it says a verb or question of reckoning (_RECKONS) and gives numbers to work with (in it or in
    the parts before it, `before`; not in a web address or a file name), or, where an embedding model answers, the program tool is its
    closest in meaning ("how many seconds are there in a week"). By its best word match instead,
    "how many minutes are in 3.5 hours" went to schedule_routine and "work out each person's
    share" to share_file. Not without a program tool; "how many items are on my to-do list" gives
    no number and is closest to `todo`."""
    runner = next((t for t in tools if runs_programs(t)), None)
    if runner is None or not _RECKONS.search(part):
        return False
    said = f"{before} {part}"
    for name in [*re.findall(r"\bhttps?://\S+", said), *toolselect.file_names(said)]:
        said = said.replace(name, " ")  # "127.0.0.1:8000" or "report2.txt" is no number to work with
    if _NUMBER.search(said):
        return True
    ranked = toolmeaning.ranked(tools, scores) if scores else []
    return bool(ranked) and ranked[0][0].name == runner.name


def runs_programs(tool) -> bool:
    """A tool that runs a program it is given as is (code_exec)."""
    return bool(getattr(tool, "code_runs_as_is", False) and getattr(tool, "code_argument", ""))


def what_is_left(request: str, done: list[ToolCall], offer: list, used: set[str] | frozenset[str] = frozenset(),
                 meaning: toolmeaning.Meaning | None = None) -> Left:
    """For a small model that would stop or go round: the parts of the request left — the
    files it names that no successful call (`done`) touched, and, where an embedding model
    answers (`meaning`), the tools of the other parts of a request of several ("read the
    email and put each errand on my todo list") that did not run: a part's best tool by
    words, where its meaning agrees (among the part's CONFIRM closest, and closer than a plain
    reply). Words alone named tools for parts such as "port set to 8080" or "tell me the
    result"; without an embedding model only files count. A part that works a value out
    (`computes`) is done once a program ran."""
    values = " ".join(json.dumps(c.arguments, ensure_ascii=False).lower() for c in done)
    files = [f for f in toolselect.file_names(request) if f.rsplit("/", 1)[-1].lower() not in values]
    to_change = [f for f in toolselect.file_names(request) if _CHANGE.search(request) and _only_read(f, done)]
    ran = {c.name for c in done} | set(used)
    tools: list = []
    # Before any call a request of one part is its own part (a model that answered at once).
    pairs = list(zip(meaning.part_texts, meaning.parts)) if meaning is not None else []
    if meaning is not None and not pairs and not ran:
        pairs = [(request, meaning.whole)]
    programs = {t.name for t in offer if runs_programs(t)}
    for i, (part, scores) in enumerate(pairs):
        if programs & ran and computes(part, offer, scores, " ".join(p for p, _ in pairs[:i])):
            continue  # a value to work out, and a program ran: not share_file's for "each person's share"
        words = toolselect.scored(toolselect.mentioned(offer, part, ran), part)
        if not words or words[0][1] <= 0:
            continue
        best, score = words[0]
        closest = [t.name for t, _ in toolmeaning.ranked(offer, scores)[:CONFIRM]]
        if (best.name not in ran and best not in tools and score > max((s for t, s in words if t.name in ran), default=0.0)
                and best.name in closest and scores.get(best.name, -1.0) > scores.get(toolmeaning.ANSWER, -1.0)):
            tools.append(best)
    return Left(files, tools, to_change)
