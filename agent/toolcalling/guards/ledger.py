"""The ledger of repairs: every guard that rewrites or second-guesses what a model wrote, in one
place, by group — what slip it answers, where it lives, which profiles it runs for.

A guard runs only for a small model's profile (`Profile.is_small_model`: one that caps its tools,
`max_tools` > 0, in a constrained step) and only while its group is not switched off by the
NAVI_GUARDS_OFF setting ("programs,paths"; for measuring what a group buys, bench/agent_eval.py
--guards-off). A big-model profile (`max_tools` 0, or native tool calling) runs none of them.
README.md beside this room keeps each group's measured effect.

Every place where a guard acts (changes a call, its arguments or the answer, asks again, puts a
step first) says so through `fired(group)`; a check that finds nothing to change does not. The
turn's counts (`counting`, `tally`) are kept with its last assistant message (`meta["guards"]`),
which bench/agent_eval.py reads to re-run only the tasks where a group fired.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class Group:
    name: str
    guards: tuple[str, ...]  # where each guard lives (module.function)
    slip: str  # what the small model gets wrong that the group puts right


GROUPS: tuple[Group, ...] = (
    Group("programs", ("turn.repairs.write_code", "guards.programs.completed_program", "guards.programs.inclusive_ranges",
                       "guards.programs.invents_numbers", "guards.programs.invents_inputs",
                       "guards.programs.computes_itself"),
          "a program argument that does not do what the request says (`1 + 12345` for a sum, range() without "
          "its end, a module never imported, a function never called): written again in a call of its own"),
    Group("values", ("turn.repairs.compute_first", "guards.values.computed_numbers", "guards.values.unstated_output"),
          "a number worked out in the model's head written into a file (a program computes it first), or a "
          "program's printed value left out of the answer (shown under it)"),
    Group("paths", ("guards.paths.fix_path", "guards.paths.fix_path_for_part"),
          "a file path beside the one the request names (`file_log.txt`, `/path/to/config.json`), or a planned "
          "write into the file an earlier step only read"),
    Group("reads", ("turn.repairs.read_first", "turn.repairs.read_named_first"),
          "a write over a file the model never saw, or a list/note filled before the file the request names "
          "was read: made a read first"),
    Group("texts", ("turn.repairs.write_text", "guards.texts.text_from", "guards.texts.unreadable",
                    "guards.texts.is_call_text", "guards.texts.new_lines", "guards.texts.after_echo",
                    "guards.texts.without_headers", "guards.texts.the_line"),
          "a file's text written from the request when a tool had returned the value (the key for the value), "
          "unreadable in its format, a call written as the text, a table's rows written again (its own rewrite kept "
          "only when it is not the prompt written back)"),
    Group("notes", ("turn.repairs.write_note", "guards.notes.grounded", "guards.notes.found_news",
                    "turn.repairs._answer_kept", "guards.notes.asked_before", "guards.notes.on_one_line",
                    "turn.repairs.keep_with_found", "guards.notes.with_found", "guards.notes.carries_found"),
          "a note or fact that carries the request's words instead of the value a tool returned; kept after a "
          "question ('tell me which day I'm off, and keep that in mind'), a line read that does not answer it; or an "
          "item the request quotes to keep with a value found kept without it"),
    Group("dates", ("tools_app.dates.with_dates",),
          "a todo list split into an item and its date, then the clock's days listed as items"),
    Group("salvage", ("guards.salvage.salvaged",),
          "a call cut by the token cap while a list ran on: closed after the last whole item, repeats cut"),
    Group("refusals", ("guards.refusals.unless_refusal", "guards.refusals.results_said"),
          "an answer over the tools' results that is a stock refusal, or code to do what a tool already did: "
          "asked again as a report, then the results themselves"),
    Group("left", ("turn.constrained.decide_step (progress.what_is_left)",),
          "an answer (or a repeated call) while a part of the request is plainly left: asked once more, told "
          "what is left"),
    Group("facts", ("turn.repairs.keep_as_said", "guards.facts.said", "guards.facts.leaves_out", "guards.facts.is_its_value"),
          "a fact kept from the owner's words alone that is not what they said (a word or number nobody said, "
          "the key again as the value, a name or number said left out): asked again as the detail in the owner's words; "
          "or an update kept with its value as the key (saved as the kept fact the request names), or a fact already kept "
          "saved under a category guessed anew (the old value left beside it): saved where it is"),
    Group("done", ("turn.constrained.decide_step (plan.Plan.served)",),
          "a request of one part served by its one planned call (a fact kept, looked up or forgotten) followed by "
          "calls nobody asked for (the fact put on the to-do list, a recall made a to-do item): answered then"),
    Group("plain", ("guards.plain.asks_nothing", "turn.constrained.constrained_step"),
          "a tool called for a plain question (\"What is the capital of France?\" → knowledge_search, \"And "
          "Italy?\" → the to-do list): a request that gives a tool nothing to do is answered in one call, no tools sent"),
)
NAMES = tuple(g.name for g in GROUPS)
RUNS_FOR = "small-model profiles (max_tools > 0); never a big-model profile"


def switched_off() -> frozenset[str]:
    """The groups NAVI_GUARDS_OFF switches off; a name that is no group stops the server."""
    off = frozenset(name.strip() for name in getattr(settings, "NAVI_GUARDS_OFF", ()) if name.strip())
    if unknown := sorted(off - set(NAMES)):
        raise ImproperlyConfigured(f"NAVI_GUARDS_OFF names no guard group: {', '.join(unknown)}; "
                                   f"the groups are {', '.join(NAMES)}")
    return off


def active(profile) -> frozenset[str]:
    """The guard groups that run for `profile`'s turns: none for a big model's, else every group
    not switched off."""
    if not profile.is_small_model:
        return frozenset()
    return frozenset(NAMES) - switched_off()


# The groups that fired in the turn in flight, by count; one dict per turn, shared by the tasks it
# starts (a tool runs in a task of its own: a copy of the context holds the same dict).
_fired: ContextVar[dict[str, int] | None] = ContextVar("guards_fired", default=None)


def fired(group: str) -> None:
    """A guard of `group` acted on what the model wrote: counted for the turn in flight (nothing
    outside one). Never raises: a count is not worth a turn."""
    with contextlib.suppress(Exception):
        counts = _fired.get()
        if counts is not None:
            counts[group] = counts.get(group, 0) + 1


@contextlib.contextmanager
def counting() -> Iterator[None]:
    """Count the guards that fire from here to the end of the block (one turn), from none."""
    token = _fired.set({})
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # closed from another task's context: nothing to undo
            _fired.reset(token)


def tally() -> dict[str, int]:
    """The counts of the turn in flight so far: only groups that fired, in the ledger's order."""
    counts = _fired.get() or {}
    return {name: counts[name] for name in NAMES if counts.get(name)}
