"""The small-model repairs of a constrained step's call that take a model call of their own or a
tool's help: a program or a file's text written again, a number worked out by a program first, a
write over an unseen file made a read (agent.toolcalling.guards says which slip each answers).
"""

from __future__ import annotations

import json
import logging

from agent.context.conversation import Conversation
from agent.llm import LLMError
from agent.llm.base import LLMIncomplete
from agent.llm.messages import ChatMessage, ToolCall
from agent.toolcalling import plan, toolselect
from agent.toolcalling.guards import facts, ledger, notes, programs, texts, values
from agent.turn.setup import Setup
from agent.turn.stopping import Stopped, until_stopped
from navi_project.llm_purpose import llm_purpose
from tools_app.context import current_stop_event

log = logging.getLogger(__name__)


async def write_code(conv: Conversation, setup: Setup, call: ToolCall, part: str | None = None) -> None:
    """`write_program` (`part`: the planned step's part, when forced), then what the program plainly forgot put in (programs.completed_program:
    a standard module never imported, a lone function never called) and the end of a span the
    request said with both ends (programs.inclusive_ranges: "1 to 12345" is range(1, 12346))."""
    key = written_as(call)  # as the model wrote it: how a repeat of it is recognised
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    argument = getattr(tool, "code_argument", "")
    own = call.arguments.get(argument) if argument and isinstance(call.arguments, dict) else None
    await write_program(conv, setup, call, part)
    if argument and isinstance(call.arguments.get(argument), str):
        completed = programs.completed_program(call.arguments[argument])
        completed = programs.inclusive_ranges(completed, conv.last_request())
        if completed != call.arguments[argument]:
            call.arguments = {**call.arguments, argument: completed}
            setup.rewritten[key] = dict(call.arguments)
        if not isinstance(own, str) or completed.strip() != own.strip():
            ledger.fired("programs")


async def write_program(conv: Conversation, setup: Setup, call: ToolCall, part: str | None = None) -> None:
    """A small model's program argument (Tool.code_argument), written again as plain code in a
    short call of its own: inside a JSON string a coder model writes `1 + 12345` for "the sum
    from 1 to 12345"; asked for code, it writes the program. For a planned part of a request of
    several (`part`: the planned step's, a value to work out), the program of that part's value
    alone (programs.PART_BRIEF). The model's own version stays when
    this one gives no Python that parses, or reads a file or path nobody named, and is not asked
    for when it is one expression that computes from builtins alone (programs.computes_itself)."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    argument = getattr(tool, "code_argument", "")
    if not argument or not isinstance(call.arguments.get(argument, ""), str):
        return
    if getattr(tool, "code_runs_as_is", False) and programs.computes_itself(call.arguments[argument]):
        return
    try:
        brief = tool.code_brief.format(**{k: v for k, v in call.arguments.items() if isinstance(v, str)})
    except (KeyError, IndexError, ValueError):
        brief = tool.code_brief
    if part and getattr(tool, "code_runs_as_is", False) and part.strip() != conv.last_request().strip():
        brief = programs.PART_BRIEF.format(part=part)
    own, said = call.arguments.get(argument, ""), programs.turn_said(conv.context)
    code = await ask_program(conv, setup, call, brief)
    if code and programs.invents_numbers(code, f"{said}\n{own}"):
        # Asked for the sum from 1 to 12345, Qwen2.5-Coder-0.5B wrote range(1, 12356); told the
        # request's numbers, range(1, 12346). Asked once more so, then the model's own stays.
        numbers = programs.numbers_in(conv.last_request())
        code = await ask_program(conv, setup, call, f"{brief} {programs.NUMBERS_NOTE.format(numbers=numbers)}") if numbers else ""
        if code and programs.invents_numbers(code, f"{said}\n{own}"):
            log.info("the program of %s written again holds a number nobody gave: the model's own is kept", call.name)
            return
    if code and programs.invents_inputs(code, conv.last_request(), own):
        log.info("the program of %s written again reads what the request never named: the model's own is kept", call.name)
        return
    if code:
        key = written_as(call)
        call.arguments = {**call.arguments, argument: code}
        setup.rewritten[key] = dict(call.arguments)


async def ask_program(conv: Conversation, setup: Setup, call: ToolCall, brief: str) -> str:
    """A program for the call's tool, written in a short call of its own ("" when none came)."""
    reply = await short_call(setup, "code", programs.code_prompt(conv.context, brief, call.name), call.name)
    return programs.code_from(reply, {t.name for t in setup.tools})


async def short_call(setup: Setup, purpose: str, messages: list[ChatMessage], tool: str) -> str:
    """One small unconstrained call at temperature 0 (the likeliest program or text), raced
    against Stop; "" when it failed."""
    profile = setup.profile
    try:
        with llm_purpose(purpose):
            response = await until_stopped(
                setup.backend.complete(messages, None, model=profile.resolved_model(), temperature=0.0, think=False,
                                       max_tokens=profile.answer_token_limit()),
                current_stop_event.get(),
            )
    except Stopped:
        raise
    except (LLMError, LLMIncomplete) as exc:
        log.info("the %s of %s was not written again: %s", purpose, tool, exc)
        return ""
    return response.content


async def write_text(conv: Conversation, setup: Setup, call: ToolCall) -> None:
    """A small model's text for a file (Tool.text_argument), after this turn's tools returned
    something, written again in a short call of its own from the request and those results: in
    the step's JSON a 0.5B model wrote the key ("timeout") where the value (45) was meant. So is
    a whole file's text its format cannot read (texts.unreadable: "debug=true&port=8080"
    for config.json), and a row appended to a table the turn has not read (the tool's
    `current_text`: its rows are shown, and only new lines are kept). The model's own text stays
    when this one is empty, runs far longer, or does not read where the model's did."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    argument = getattr(tool, "text_argument", "")
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    action = arguments.get(getattr(tool, "action_parameter", "action")) or "write"
    if not hasattr(tool, "takes_text") or not tool.takes_text(arguments):
        return
    if ("texts" if tool.text_in_file else "notes") not in setup.guards:
        return  # a big model's profile, or the group switched off (agent.toolcalling.guards.ledger)
    own = tool.kept_text(arguments)
    path = tool.text_place(arguments)
    malformed = action != "append" and texts.unreadable(path, own)
    table = None  # the rows a row is appended to, unless the turn read them already
    if (peek := getattr(tool, "current_text", None)) and texts.read_this_turn(conv.context, path) is None:
        table = await peek(arguments)
    # What informs the text: any result for a file (a read, a program's output); for a note or a
    # fact, another tool's (a scratchpad's "Section saved" tells nothing to write: "note one, then two").
    informing = [m for m in this_turn(conv.context) if m.role == "tool" and not m.content.startswith("ERROR")
                 and (m.name != call.name or tool.text_in_file)]
    if not malformed and table is None and not informing:
        return  # nothing returned yet: the text comes from the request, as the model wrote it
    if not malformed and table is None and notes.quoted_in(own, conv.last_request()):
        return  # the very words the request quotes ("add 'stock is low'")
    if not tool.text_in_file:
        await write_note(conv, setup, call, tool, own, "\n".join(m.content for m in informing))
        return
    prompt = texts.text_prompt(conv.context, action, path, conv.clock.date(), current=table)
    reply = await short_call(setup, "text", prompt, call.name)
    text = texts.text_from(reply, own)
    if text and table is not None:
        text = texts.new_lines(text, table)
    if not tool.text_in_file:
        text = text.strip()
    if text and texts.is_call_text(text, tool):
        return  # a call written where the file's text goes
    text = texts.after_echo(text, own)  # the prompt written back before the text: the text after it
    text = texts.without_headers(text, own)  # a result's header copied in with the result
    if action != "append" and table is None and texts.read_this_turn(conv.context, path) is None:
        # One line asked for, into a file not read (a copy, not an edit of that file): not the whole text.
        text = texts.the_line(text, conv.last_request())
    if not text:
        return  # nothing but the prompt written back: the model's own stays
    if text and action != "append" and texts.unreadable(path, text) and not texts.unreadable(path, own):
        return  # the model's own text reads; this one does not
    if text and text != own:
        key = written_as(call)
        call.arguments = {**arguments, argument: text}
        setup.rewritten[key] = dict(call.arguments)
        ledger.fired("texts")


async def write_note(conv: Conversation, setup: Setup, call: ToolCall, tool, own: str, results: str) -> None:
    """A note's or a fact's text after another tool returned something (`write_text`): the
    model's own stays when it is what the results said (every word of it there, one at least not
    the request's: "Ines Varga" read from doctor.txt); else it is asked again as one short sentence
    (notes.note_prompt), kept only when that sentence carries something the results said
    and the request did not. A program's exit-code line (or a result's header) copied in is left out."""
    request = conv.last_request()
    if (bare := texts.without_headers(own, "").rstrip("\n")) != own.rstrip("\n") and bare.strip():
        # "210.0\n[exit code 0]": the program's exit-code line copied in with its output
        key, own = written_as(call), bare
        call.arguments = tool.with_kept_text(call.arguments, own)
        setup.rewritten[key] = dict(call.arguments)
        ledger.fired("notes")
    if await _answer_kept(conv, setup, call, tool, own, results):
        return
    if notes.grounded(own, results, request):
        return
    for ask in range(len(notes.NOTE_ASKS)):
        prompt = notes.note_prompt(conv.context, tool.text_place(call.arguments), call.name, ask)
        reply = (await short_call(setup, "text", prompt, call.name) or "").strip()
        text = reply.splitlines()[0].strip() if reply else ""
        if text and len(text) <= notes.NOTE_CHARS and notes.found_news(text, results, request) \
                and not texts.is_call_text(text, tool):
            break
    else:
        return
    key = written_as(call)
    call.arguments = tool.with_kept_text(call.arguments, text)
    setup.rewritten[key] = dict(call.arguments)
    ledger.fired("notes")


async def _answer_kept(conv: Conversation, setup: Setup, call: ToolCall, tool, own: str, results: str) -> bool:
    """A planned part that keeps "that" after a part that asks something of what was read ("Read
    shifts.txt, tell me which day I'm off, and keep that in mind"): the note is the line of the
    results that answers the question (notes.answer_prompt), when one line holds it; the model's
    own stays when it is that line's already."""
    steps = setup.tracker.plan.steps if setup.tracker.plan else []
    at = setup.tracker.plan.next(setup.tracker.done) if steps else None
    question = notes.asked_before(steps, at[0]) if at is not None and call.name in {t.name for t in at[1].tools} else ""
    if not question:
        return False
    reply = (await short_call(setup, "text", notes.answer_prompt(conv.context, question, call.name), call.name) or "").strip()
    text = reply.splitlines()[0].strip() if reply else ""
    if not text or len(text) > notes.NOTE_CHARS or not notes.on_one_line(text, results) or texts.is_call_text(text, tool):
        return False
    if text.lower() == own.strip().lower():
        return True
    key = written_as(call)
    call.arguments = tool.with_kept_text(call.arguments, text)
    setup.rewritten[key] = dict(call.arguments)
    ledger.fired("notes")
    return True


async def keep_with_found(conv: Conversation, setup: Setup, call: ToolCall, part: str | None) -> None:
    """A small model's call of a tool that keeps what it is given (a to-do list, a note), for a
    planned part that quotes the words to keep with a value found before it (notes.with_found:
    "add 'bake bread on my day off' with that day to my to-do list"), that keeps no item holding
    both: Qwen2.5-Coder-0.5B put the quoted words on the list and the file's lines beside them as
    items. The value is asked for alone (notes.value_prompt) and kept as one item, the quoted
    words with it, when it is something the results said (notes.carries_found)."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    quote, meant = notes.with_found(part or "")
    if not quote or not getattr(tool, "keeps", False) or not isinstance(call.arguments, dict):
        return
    results = "\n".join(m.content for m in this_turn(conv.context)
                        if m.role == "tool" and m.name != call.name and not m.content.startswith("ERROR"))
    request = conv.last_request()
    if not results or any(notes.carries_found(item, quote, results, request)
                          for item in tool.kept_text(call.arguments).splitlines()):
        return
    reply = await short_call(setup, "text", notes.value_prompt(conv.context, call.name, meant), call.name)
    value = next((line.strip().strip("`*-").strip().rstrip(".") for line in (reply or "").splitlines() if line.strip()), "")
    text = f"{quote} ({value})"
    if not value or len(value) > notes.NOTE_CHARS or not notes.carries_found(text, quote, results, request):
        log.info("an item quoted to keep with a value found was not written with it: the model's own stays")
        return
    key = written_as(call)
    call.arguments = tool.with_kept_text(call.arguments, text)
    setup.rewritten[key] = dict(call.arguments)
    ledger.fired("notes")


async def keep_as_said(conv: Conversation, setup: Setup, call: ToolCall) -> None:
    """A small model's fact (a tool that keeps `as_said`: memory_save) whose value nobody said is
    a kept fact's, under another key, saved as that fact (the tool's `kept_place`: an update
    written as the old value under the new one as key); one under a category guessed
    anew for a key already kept, saved where it is (the tool's `kept_category`); and one kept
    from the owner's words alone (no other tool returned anything this turn) that is not what
    they said (facts.said), asked again in a short call, kept only when that is said."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    if not getattr(tool, "as_said", False) or not isinstance(call.arguments, dict) or not tool.takes_text(call.arguments):
        return
    as_written = written_as(call)
    heard = facts.heard(conv.context)
    found = any(m.role == "tool" and m.name != call.name and not m.content.startswith("ERROR") for m in this_turn(conv.context))
    if (not found and hasattr(tool, "kept_place") and not facts.said(tool.kept_text(call.arguments), heard)
            and (place := await tool.kept_place(call.arguments))):
        # A value nobody said that is a kept fact's (copied from the memory summary): that fact is
        # the one meant. "My dentist changed, it's now Dr. Haddad" was saved as "Dr. Haddad" =
        # "Dr. Moreau" beside "health: dentist" = "Dr. Moreau"; its value is then asked again below.
        call.arguments = {**call.arguments, "category": place[0], "key": place[1]}
        setup.rewritten[as_written] = dict(call.arguments)
        ledger.fired("facts")
    if hasattr(tool, "kept_category") and (category := await tool.kept_category(call.arguments)):
        # "personal secretary" (the profile's name) for "my dentist changed": the old value stayed.
        call.arguments = {**call.arguments, "category": category}
        setup.rewritten[as_written] = dict(call.arguments)
        ledger.fired("facts")
    if found:
        return  # what a tool returned is write_note's to ground
    own, key, request = tool.kept_text(call.arguments), str(call.arguments.get("key") or ""), conv.last_request()
    if not facts.said(own, heard, key) or facts.leaves_out(own, key, request):
        for ask in range(len(facts.FACT_ASKS)):
            reply = await short_call(setup, "text", facts.fact_prompt(request, ask), call.name)
            text = facts.detail_from(reply)
            # Not held against the key: a model that wrote the whole statement as the key ("locker at the
            # pool is number 214") then wrote a refusal as the value.
            if text and len(text) <= facts.FACT_CHARS and facts.said(text, heard) and not texts.is_call_text(text, tool) \
                    and not facts.leaves_out(text, key, request):
                call.arguments = tool.with_kept_text(call.arguments, text)
                setup.rewritten[as_written] = dict(call.arguments)
                ledger.fired("facts")
                break
        else:
            log.info("a fact the owner did not say in full (%r) was not put right: the model's own stays", own)
    value = tool.kept_text(call.arguments)
    if hasattr(tool, "named_place") and facts.is_its_value(str(call.arguments.get("key") or ""), value) \
            and (place := await tool.named_place(request)) and place != (call.arguments.get("category"), call.arguments.get("key")):
        # "Dr. Haddad" = "Dr. Haddad" for "My dentist changed, it's now Dr. Haddad": the key is the
        # value again, and the request names the one kept fact it updates (health: dentist).
        call.arguments = {**call.arguments, "category": place[0], "key": place[1]}
        setup.rewritten[as_written] = dict(call.arguments)
        ledger.fired("facts")


async def compute_first(conv: Conversation, setup: Setup, call: ToolCall) -> ToolCall:
    """A small model's short text for a file that holds a number nobody gave (a total, a count:
    values.computed_numbers) becomes a program that works it out and prints it, when the
    profile has a program tool (code_exec) and no program ran this turn: the model added up a
    column of hours to 27 where the total was 37.5, and a 0.5B coder model cannot add but writes
    the program that does. The write comes at a later step, from the program's output; the call
    goes through the same policy as any call of that tool. The model's own call stays when no
    program comes, or the program reads what the request never named."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    argument = getattr(tool, "text_argument", "")
    text = arguments.get(argument)
    runner = next((t for t in setup.tools if getattr(t, "code_runs_as_is", False) and t.code_argument), None)
    if not hasattr(tool, "takes_text") or not tool.takes_text(arguments) or not isinstance(text, str) or runner is None:
        return call
    if any(m.role == "tool" and m.name == runner.name for m in this_turn(conv.context)):
        return call  # a program ran: what it printed is what the text was written from
    if not values.computed_numbers(text, programs.turn_said(conv.context)):
        return call
    path = tool.text_place(arguments)
    program = await ask_program(conv, setup, ToolCall(id=call.id, name=runner.name, arguments={}),
                             values.compute_brief(path, conv.last_request()))
    if not program or programs.invents_inputs(program, conv.last_request(), ""):
        return call
    program = programs.inclusive_ranges(programs.completed_program(program), conv.last_request())
    log.info("a number nobody gave for %s: worked out by a program first", path)
    ledger.fired("values")
    return ToolCall(id=call.id, name=runner.name, arguments={runner.code_argument: program}, constrained=call.constrained)


async def read_first(setup: Setup, call: ToolCall, request: str) -> ToolCall:
    """A small model's write over an existing file this turn has not touched becomes a read of
    that file (the tool's `read_first`): the model decides again with the content in front of it,
    and what it writes then is written from it (`write_text`). The owner's file is never replaced
    by a model that never saw it."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    read_first = getattr(tool, "read_first", None)
    if read_first is None or not isinstance(call.arguments, dict):
        return call
    touched = {str(c.arguments.get(k)).strip().strip("/").lower() for c in setup.tracker.done
               if isinstance(c.arguments, dict) for k in ("path", "destination") if c.arguments.get(k)}
    arguments = await read_first(call.arguments, touched, request)
    if arguments is None:
        return call
    ledger.fired("reads")
    return ToolCall(id=call.id, name=call.name, arguments=arguments, constrained=call.constrained)


async def read_named_first(setup: Setup, call: ToolCall, query: str) -> ToolCall:
    """A small model's call of a tool that keeps what it is given (`Tool.keeps`: a list, a note,
    a fact) before any call of the turn worked, keeping words the request never said, for a
    request that names a file that exists, becomes a read of that file: what is kept is then
    written from its content, not invented.
    The read is a call like any other (the filesystem tool's policy and folders)."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    reader = next((t for t in setup.tools if t.name == plan.FILE_TOOL), None)
    if not getattr(tool, "keeps", False) or setup.tracker.done or reader is None or not hasattr(reader, "read_first"):
        return call
    if not notes.found_news(tool.kept_text(call.arguments), tool.kept_text(call.arguments), query):
        return call  # what it keeps is the request's own words ("note done …, not in notes.txt")
    for name in toolselect.file_names(query)[:3]:
        arguments = await reader.read_first({"action": "write", "path": name}, set())
        if arguments is not None:
            log.info("a call of %s before %s was read: the file is read first", call.name, name)
            ledger.fired("reads")
            return ToolCall(id=call.id, name=reader.name, arguments=arguments, constrained=call.constrained)
    return call


def this_turn(context: list[ChatMessage]) -> list[ChatMessage]:
    start = max((i for i, m in enumerate(context) if m.role == "user" and not m.is_summary), default=-1)
    return context[start + 1:]


def written_as(call: ToolCall) -> str:
    return json.dumps([call.name, call.arguments], sort_keys=True, default=str)
