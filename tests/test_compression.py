"""Context compression: partitioning, the summary call, both triggers, the event, and the
display history staying untouched."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from agent.context.conversation import DBConversation
from agent.frames.events import ContextCompressed, StreamEnd
from agent.llm.messages import ChatMessage, ToolCall
from agent.llm.ollama_backend import OllamaBackend
from agent.registry import get_agent
from agent.turn.compression import SUMMARY_PREFIX, compress_context, format_for_summary, partition
from sessions_app.models import Message, Session
from tests.llm_server import Rule, Turn


def U(text, **kw):
    return ChatMessage(role="user", content=text, **kw)


def A(text="", calls=()):
    return ChatMessage(role="assistant", content=text, tool_calls=list(calls))


def T(text, call_id="c1", name="shell"):
    return ChatMessage(role="tool", content=text, tool_call_id=call_id, name=name)


def tool_turn(i):
    """A turn whose tool group contains an injected image message (role=user)."""
    return [
        U(f"question {i}"),
        A(calls=[ToolCall("a", "screenshot", {"x": 1}), ToolCall("b", "shell", {"cmd": "ls"})]),
        T("shot", "a", "screenshot"),
        U("[image from screenshot]", images=["aGk="]),
        T("files", "b", "shell"),
        A(f"answer {i}"),
    ]


class TestPartition:
    def test_it_keeps_the_last_n_turns(self):
        ctx = [ChatMessage(role="system", content="sys")]
        for i in range(5):
            ctx += [U(f"q{i}"), A(f"a{i}")]
        p = partition(ctx, keep_recent=2)
        assert [m.content for m in p.system] == ["sys"]
        assert [m.content for m in p.to_summarize] == ["q0", "a0", "q1", "a1", "q2", "a2"]
        assert [m.content for m in p.to_keep] == ["q3", "a3", "q4", "a4"]

    def test_nothing_to_summarise_with_few_turns(self):
        ctx = [U("q0"), A("a0"), U("q1")]
        p = partition(ctx, keep_recent=2)
        assert p.to_summarize == [] and p.to_keep == ctx

    def test_a_tool_group_is_never_split_by_an_injected_image(self):
        ctx = tool_turn(0) + tool_turn(1) + tool_turn(2)
        p = partition(ctx, keep_recent=1)
        assert p.to_keep == tool_turn(2)
        assert p.to_summarize == tool_turn(0) + tool_turn(1)
        for part in (p.to_summarize, p.to_keep):  # every call's result is on the same side
            calls = {c.id for m in part for c in m.tool_calls}
            results = {m.tool_call_id for m in part if m.role == "tool"}
            assert calls == results

    def test_an_earlier_summary_is_folded_into_the_next_pass(self):
        old = U(f"{SUMMARY_PREFIX}\n- earlier stuff", is_summary=True)
        ctx = [old, U("q1"), A("a1"), U("q2"), A("a2")]
        p = partition(ctx, keep_recent=1)
        assert p.to_summarize == [old, U("q1"), A("a1")]
        assert "Earlier summary:\n" in format_for_summary(p.to_summarize)

    def test_formatting_is_compact(self):
        text = format_for_summary(
            [A(calls=[ToolCall("a", "write", {"data": "x" * 500})]), T("y" * 1000, "a", "write")]
        )
        call_line, result_line = text.splitlines()
        assert call_line.startswith("Assistant called write(") and len(call_line) <= len("Assistant called write()") + 120
        assert result_line.startswith("Tool result (write): ") and len(result_line) <= len("Tool result (write): ") + 300


class TestCompressContext:
    async def test_it_summarises_with_think_off_and_caps_the_input(self, llm, settings):
        llm.script(Turn(content="- the user asked many things"))
        ctx = [ChatMessage(role="system", content="sys")]
        for i in range(200):
            ctx += [U(f"question {i} " + "z" * 100), A(f"answer {i}")]
        out = await compress_context(ctx, OllamaBackend(), "m", 0.3, keep_recent=3)
        assert out[0].role == "system"
        assert out[1].role == "user" and out[1].is_summary and "- the user asked many things" in out[1].content
        assert [m.content for m in out[2:]][-1] == "answer 199" and len(out) == 2 + 6
        request = llm.requests[-1]
        assert request["think"] is False and request["options"]["temperature"] == 0.3
        assert len(request["messages"][-1]["content"]) <= 12_000

    async def test_an_empty_summary_is_an_error(self, llm):
        from agent.turn.compression import CompressionError

        llm.script(Turn(content="  "))
        with pytest.raises(CompressionError):
            await compress_context([U("a"), A("b"), U("c")], OllamaBackend(), "m", 0.3, keep_recent=1)


def _history(session: Session, turns: int) -> None:
    seq = 0
    for i in range(turns):
        for role, text in (("user", f"old question {i}"), ("assistant", f"old answer {i}")):
            seq += 1
            Message.objects.create(session=session, seq=seq, role=role, content=text)


def _summary_rule(llm):
    llm.add_rule(Rule(match="", system="You compress", turns=[Turn(content="- they talked about old things")]))


@pytest.mark.django_db(transaction=True)
class TestTriggers:
    async def _run(self, session, text="new question"):
        agent = await sync_to_async(get_agent)()
        return [e async for e in agent.run_stream(str(session.pk), text)]

    async def test_pre_turn_compresses_before_the_llm_call(self, session, llm, settings, no_planning):
        settings.CONTEXT_KEEP_RECENT = 2
        await sync_to_async(_history)(session, 6)
        await Session.objects.filter(pk=session.pk).aupdate(context_token_count=8000)  # ≥ 0.8 × 8192
        _summary_rule(llm)
        display_before = await sync_to_async(lambda: list(Message.objects.filter(in_display=True).values_list("id", "content")))()
        events = await self._run(session)
        kinds = [e.type for e in events]
        assert kinds.index("context_compressed") < kinds.index("stream_delta")
        event = next(e for e in events if isinstance(e, ContextCompressed))
        assert (event.messages_before, event.messages_after) == (13, 4)  # 12 old + new → summary + 1 old turn + new
        main_call = llm.requests[-1]["messages"]
        assert [m["role"] for m in main_call] == ["system", "user", "user", "assistant", "user"]
        assert main_call[1]["content"].startswith(SUMMARY_PREFIX)
        display_after = await sync_to_async(lambda: list(Message.objects.filter(in_display=True).values_list("id", "content")))()
        assert display_after[: len(display_before)] == display_before  # untouched, only appended
        assert [c for _, c in display_after[len(display_before):]] == ["new question", "echo: new question"]
        conv = await DBConversation.open(str(session.pk))
        assert conv.context[0].is_summary and [m.content for m in conv.context[1:]] == [
            "old question 5", "old answer 5", "new question", "echo: new question"]

    async def test_post_turn_compresses_after_stream_end_and_resets_tokens(self, session, llm, settings, no_planning):
        settings.CONTEXT_KEEP_RECENT = 1
        await sync_to_async(_history)(session, 3)
        _summary_rule(llm)
        llm.add_rule(Rule(match="new question", turns=[Turn(content="big answer", prompt_tokens=7000, eval_tokens=10)]))
        events = await self._run(session)
        kinds = [e.type for e in events]
        assert kinds[-2:] == ["stream_end", "context_compressed"]
        assert next(e for e in events if isinstance(e, StreamEnd)).context_tokens == 7010
        assert (await Session.objects.aget(pk=session.pk)).context_token_count == 0
        conv = await DBConversation.open(str(session.pk))
        assert [m.content for m in conv.context[1:]] == ["new question", "big answer"]

    async def test_a_second_compression_folds_the_first_summary(self, session, llm, settings, no_planning):
        settings.CONTEXT_KEEP_RECENT = 1
        await sync_to_async(_history)(session, 3)
        _summary_rule(llm)
        llm.add_rule(Rule(match="question", turns=[Turn(content="ok", prompt_tokens=7000)]))
        await self._run(session, "question one")
        await self._run(session, "question two")
        summaries = await sync_to_async(lambda: list(Message.objects.filter(is_summary=True).order_by("seq")))()
        assert [(s.in_context, s.in_display) for s in summaries] == [(False, False), (True, False)]
        summary_requests = [r for r in llm.requests if "You compress" in r["messages"][0]["content"]]
        assert "Earlier summary:" in summary_requests[-1]["messages"][-1]["content"]

    async def test_a_failing_compression_is_logged_and_the_turn_goes_on(self, session, llm, settings, no_planning):
        settings.CONTEXT_KEEP_RECENT = 1
        await sync_to_async(_history)(session, 3)
        await Session.objects.filter(pk=session.pk).aupdate(context_token_count=8000)
        llm.add_rule(Rule(match="", system="You compress", turns=[Turn(status=500, error="model crashed")]))
        events = await self._run(session)
        assert "context_compressed" not in [e.type for e in events]
        assert events[-1].type == "stream_end" and events[-1].content == "echo: new question"
        assert not await Message.objects.filter(is_summary=True).aexists()

    async def test_disabled_or_below_threshold_does_nothing(self, session, llm, settings, no_planning):
        settings.CONTEXT_KEEP_RECENT = 1
        await sync_to_async(_history)(session, 3)
        await Session.objects.filter(pk=session.pk).aupdate(context_token_count=6000)  # < 0.8 × 8192
        assert "context_compressed" not in [e.type for e in await self._run(session)]
        settings.CONTEXT_COMPRESSION_ENABLED = False
        await Session.objects.filter(pk=session.pk).aupdate(context_token_count=8000)
        assert "context_compressed" not in [e.type for e in await self._run(session, "again")]


class TestWorkersNotWanted:
    """A worker with nothing to do (compression below its threshold) is never started: no task,
    no trip through the event loop before the LLM call."""

    async def test_an_unwanted_worker_is_not_run_and_a_wanted_one_is(self):
        from types import SimpleNamespace

        from agent.turn import workers
        from agent.turn.compression import CompressionWorker

        ran = []

        class Probe(workers.Worker):
            name = "probe"

            def __init__(self, want: bool) -> None:
                self.want = want

            def wanted(self, ctx):
                return self.want

            async def run(self, ctx):
                ran.append(self.want)
                return workers.WorkerResult()

        profile = SimpleNamespace(resolved_model=lambda: "m")
        conv = SimpleNamespace(persistent=True)
        backend = SimpleNamespace(name="ollama")
        low = workers.WorkerContext(conv, profile, backend, token_count=10, max_tokens=1000, phase="pre")
        full = workers.WorkerContext(conv, profile, backend, token_count=990, max_tokens=1000, phase="pre")
        await workers.run_workers([Probe(False), Probe(True)], low)
        assert ran == [True]
        assert not CompressionWorker().wanted(low)
        assert CompressionWorker().wanted(full)
        assert not CompressionWorker().wanted(
            workers.WorkerContext(SimpleNamespace(persistent=False), profile, backend, 990, 1000, "pre")
        )
