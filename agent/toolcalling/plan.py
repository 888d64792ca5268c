"""A small model's request of several parts as steps in order ("read parking.txt and put the spot
number into the scratchpad section 'car'"). A 0.5B model given such a request jumps to the last
part's tool, or stops after the first result; told what is left, it answers anyway. So the parts
are taken in the order the request says them, each with the tools that plainly do it, and a
capped step (profile `max_tools`) on a part with such tools is offered those tools only and may
not answer: the model then writes the call's arguments, which it does well.

A part's tools, from what it says, not from word lists of tasks: a file name (the file tools), a
web address (the tools that take a `url`), a tool named by its exact name, a value to work out
(`computes`: the program tool), or, where an embedding model answers, the tool that the part's
words and its meaning agree on, clearly more than on a plain reply. A part with none of these
("tell me the result") is left to the model. There is a plan only when the first part and one more
have tools; a step is checked off by a successful call of one of its tools after the step before it
was, and forced at most MAX_TRIES times. A request with no
such plan whose one call is plain gets a plan of that one step (`first_call`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agent.llm.messages import ToolCall
from agent.toolcalling import toolmeaning, toolselect
from agent.toolcalling.progress import CONFIRM, computes, runs_programs

MAX_TRIES = 2  # forced steps on one part: a call that fails twice leaves the part to the model
# A part's best word match counts when it is among the part's CONFIRM closest in meaning (the rule
# of `progress.what_is_left`) and closer than a plain reply by MARGIN (all-MiniLM-L6-v2: "tell me
# its output" is 0.03 closer to `terminal` than to a reply; "make a todo list of …" 0.20 closer to `todo`).
MARGIN = 0.1
AGREED_MARGIN = 0.02
_URL = re.compile(r"\bhttps?://\S+", re.I)
FILE_TOOL = "filesystem"


@dataclass
class Step:
    """One part of the request and the tools that do it ([]: the model chooses)."""

    part: str
    tools: list = field(default_factory=list)
    tries: int = 0


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    single: bool = False  # the request's one call, not a request of several parts (`first_call`)
    named: object = None  # no step planned: a request of one part's best word match (`served`)

    def __bool__(self) -> bool:
        return bool(self.steps)

    def next(self, done: list[ToolCall]) -> tuple[int, Step] | None:
        """(index, step) of the first part with tools not done yet; None when all are. A part
        without tools is passed over: what the model does for it cannot be told apart."""
        names = [c.name for c in done]
        at = 0
        for i, step in enumerate(self.steps):
            if not step.tools:
                continue
            found = next((j for j in range(at, len(names)) if names[j] in {t.name for t in step.tools}), None)
            if found is None:
                return i, step
            at = found + 1
        return None

    def served(self, request: str, done: list[ToolCall]) -> bool:
        """A request of one part planned to a tool whose one call is all it asks (`Tool.one_call`:
        a fact kept, looked up or forgotten), and that call worked: what is left is the answer.
        Told "Remind me of my passport number", a 0.5B model found it, then made to-do items of it
        and answered with the list; "keep in mind …" was saved, then put on the to-do list twice.
        So is a request of one part with no step planned whose first call that worked was of the
        tool its words rank first (`named`): "What's my gym locker code again?" was looked up, then
        kept as a new fact "gym locker code: 5520" = "My request asks to keep …"."""
        if not self.steps:
            return (self.named is not None and getattr(self.named, "one_call", False) and bool(done)
                    and done[0].name == self.named.name)
        return (self.single and len(self.steps) == 1 and self.steps[0].part == request and bool(self.steps[0].tools)
                and all(getattr(t, "one_call", False) for t in self.steps[0].tools) and self.next(done) is None)

    def note(self, index: int) -> str:
        step = self.steps[index]
        names = " or ".join(t.name for t in step.tools)
        return (f'[next step] My request has {len(self.steps)} parts; do them in order. Part {index + 1}: '
                f'"{step.part}". Call {names} for this part now: {{"name": "{step.tools[0].name}", "arguments": {{…}}}}.')


def make(request: str, tools: list, meaning: toolmeaning.Meaning | None) -> Plan:
    """The request's parts in order, each with its tools (see the module's docstring), when two
    parts or more have tools; else its plain first call (`first_call`), or an empty plan."""
    parts = meaning.part_texts if meaning is not None and meaning.part_texts else toolmeaning.parts_of(request)
    scores = meaning.parts if meaning is not None and meaning.part_texts else [None] * len(parts)
    steps = [Step(part, tools_for(part, tools, part_scores, " ".join(parts[:i])))
             for i, (part, part_scores) in enumerate(zip(parts, scores))]
    # A question the next part answers from a web address ("How many people live in Varnholt? It
    # says on <url>. Put the number in population.txt."), or the numbers the next part works out
    # ("Three of us shared a 96 euro dinner. Work out each person's share …": its program is
    # written from the whole request): the reading or the working out comes first.
    while len(steps) > 1 and not steps[0].tools and steps[1].tools and (
            _URL.search(steps[1].part) or computes(steps[1].part, tools, None, steps[0].part)):
        steps = steps[1:]
    # A first part without tools leaves the order unknown from the start: no plan.
    if steps and steps[0].tools and sum(bool(s.tools) for s in steps) > 1:
        return Plan(steps)
    return first_call(request, tools, meaning, steps)


def first_call(request: str, tools: list, meaning: toolmeaning.Meaning | None, steps: list[Step]) -> Plan:
    """A request with no plan of parts whose first call is plain (a plan of that one step): of
    several parts, the first when it has tools (`tools_for`) and no other has; of one, when it
    names one tool by its exact name, gives a web address (the tools that take a `url`), or the
    request's best word match is also its closest tool in meaning, closer than a plain reply by
    AGREED_MARGIN (the two agreeing, as for a part's tools: with MARGIN, "Keep in mind that my
    locker at the pool is number 214", 0.096 closer to memory_save, was left to a 0.5B model that
    put it on the to-do list). Its first step is then that call (a plan of one step), not the model's pick
    among the offer: on the eval's
    wordings the two signals agreeing named a needed tool far more often than Qwen2.5-Coder-0.5B
    chose one among the 4–5 offered. A file name alone is no such sign ("write what you remember
    into address.txt" needs memory first). Without an embedding model only names and addresses
    count."""
    if len(steps) > 1:
        return Plan(steps[:1], single=True) if steps[0].tools else Plan()
    chosen = _named_or_addressed(request, tools)
    if chosen is None:
        chosen = _agreed(request, tools, meaning)
    if chosen:
        return Plan([Step(request, chosen)], single=True)
    words = toolselect.scored(toolselect.mentioned(tools, request), request)
    return Plan(named=words[0][0] if words and words[0][1] > 0 else None)


def _agreed(request: str, tools: list, meaning: toolmeaning.Meaning | None) -> list:
    """[the tool] when the request's best word match is also its closest tool in meaning, closer
    than a plain reply by AGREED_MARGIN; [] otherwise (or without an embedding model)."""
    if meaning is None:
        return []
    words = toolselect.scored(toolselect.mentioned(tools, request), request)
    closest = toolmeaning.ranked(tools, meaning.whole)
    if not words or words[0][1] <= 0 or not closest or words[0][0].name != closest[0][0].name:
        return []
    best = words[0][0]
    if meaning.whole.get(best.name, -1.0) < meaning.whole.get(toolmeaning.ANSWER, -1.0) + AGREED_MARGIN:
        return []
    return [best]


def tools_for(part: str, tools: list, scores: dict[str, float] | None, before: str = "") -> list:
    """The tools that plainly do this part ([] when it does not say); `before`: the request's
    parts before it."""
    plain = _named_or_addressed(part, tools)
    if plain is not None:
        return plain
    if toolselect.file_names(part):
        return [t for t in tools if t.name == FILE_TOOL]
    if computes(part, tools, scores, before):
        return [t for t in tools if runs_programs(t)]
    if scores is None:
        return []
    words = toolselect.scored(toolselect.mentioned(tools, part), part)
    if not words or words[0][1] <= 0:
        return []
    best = words[0][0]
    ranked = toolmeaning.ranked(tools, scores)
    closest = [t.name for t, _ in ranked[:CONFIRM]]
    # Words and meaning naming the same tool first need less of a lead over a plain reply.
    margin = AGREED_MARGIN if ranked and ranked[0][0].name == best.name else MARGIN
    if best.name in closest and scores.get(best.name, -1.0) >= scores.get(toolmeaning.ANSWER, -1.0) + margin:
        return [best]
    return []


def _named_or_addressed(text: str, tools: list) -> list | None:
    """The one tool `text` names by its exact name, or the tools that take a `url` when it gives a
    web address; None when it does neither."""
    named = [t for t in tools if re.search(rf"(?<![\w-]){re.escape(t.name)}(?![\w-])", text)]
    if len(named) == 1:
        return named
    if _URL.search(text):
        return [t for t in toolselect.ranked(tools, text) if "url" in ((t.parameters or {}).get("properties") or {})]
    return None
