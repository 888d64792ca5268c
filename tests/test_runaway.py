"""An answer that runs away (issue #40 item 4): a model saying the same sentence again and again
is cut with the sentence said once, on every path; a small model's profile has an answer cap."""

from __future__ import annotations

import pytest

from agent.frames.events import to_frame
from agent.models import Profile
from agent.registry import get_agent
from agent.turn.runaway import RunawayGuard, repeated_tail
from sessions_app.models import Message
from tests.llm_server import Rule, Turn

SENTENCE = "Paris is the capital of France. "
LOOP = "The capital of France is Paris, a city on the Seine. " + SENTENCE * 300


class TestTheTail:
    def test_a_sentence_said_again_and_again_is_a_loop_and_kept_once(self):
        guard = RunawayGuard()
        text = ""
        for i in range(0, len(LOOP), 7):
            text = LOOP[:i + 7]
            if guard.looping(text):
                break
        assert guard.cut == "The capital of France is Paris, a city on the Seine. " + SENTENCE.strip()
        assert len(text) < 600  # seen within a few repetitions, not at the end of the stream

    def test_a_loop_ending_mid_sentence_is_found(self):
        assert repeated_tail("Hello. " + "again and again " * 30 + "again an") == (16, 30)

    @pytest.mark.parametrize("text", [
        "\n".join(f"{i}. Buy item number {i} at the shop" for i in range(1, 60)),  # a numbered list
        "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(40)),  # a table
        "def f(x):\n    return x\n\n" * 3 + "print(f(1))\n",  # the same short block three times
        "ha" * 20,  # a laugh is not a screenful
        "=" * 80 + "\nTitle\n" + "=" * 80,  # a rule line
    ])
    def test_lists_tables_code_and_rules_are_not_loops(self, text):
        assert repeated_tail(text) is None
        guard = RunawayGuard()
        assert not any(guard.looping(text[:i]) for i in range(1, len(text) + 1))


async def _frames(session_id: str, text: str) -> list[dict]:
    return [to_frame(e) async for e in get_agent().run_stream(session_id, text)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["default", "native", "openai"])
async def test_a_looping_answer_is_cut_and_saved_once(llm, session, no_planning, path):
    if path != "default":
        llm.schemas = set()  # the answer call of a server that ignores `format`
        await Profile.objects.filter(pk="secretary").aupdate(llm_backend="ollama" if path == "native" else "openai")
    llm.add_rule(Rule(match="capital", turns=[Turn(content=LOOP)] * 3))
    frames = await _frames(str(session.pk), "What is the capital of France?")
    end = frames[-1]
    assert end["type"] == "stream_end", frames[-3:]
    assert end["content"].count(SENTENCE.strip()) == 1 and end["content"].startswith("The capital of France is Paris")
    shown = "".join(f["content"] for f in frames if f["type"] == "text_delta")
    assert len(shown) < 2000  # the call was closed: not 9 600 characters streamed to the page
    answer = await Message.objects.filter(session_id=session.pk, role="assistant").alast()
    assert answer.content == end["content"] and answer.status == "complete"
    assert answer.meta.get("cut") == "repetition"
    # the chat goes on: the next question is answered as usual
    llm.add_rule(Rule(match="Italy", turns=[Turn(content="Rome.")] * 3))
    frames = await _frames(str(session.pk), "And Italy?")
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Rome."


@pytest.mark.django_db(transaction=True)
async def test_a_small_models_profile_caps_its_answer_and_its_own_cap_wins(llm, session, no_planning, settings):
    settings.LLM_MAX_ANSWER_TOKENS = 4096
    settings.LLM_MAX_ANSWER_TOKENS_SMALL = 700
    await Profile.objects.filter(pk="secretary").aupdate(max_tools=5)
    llm.add_rule(Rule(match="", turns=[Turn(content="A short answer.")] * 20))
    frames = await _frames(str(session.pk), "What is the capital of France?")
    assert frames[-1]["type"] == "stream_end"
    assert {r["options"]["num_predict"] for r in llm.requests if r.get("messages")} == {700}
    await Profile.objects.filter(pk="secretary").aupdate(max_answer_tokens=2000)
    await _frames(str(session.pk), "And Italy?")
    assert llm.requests[-1]["options"]["num_predict"] == 2000
    await Profile.objects.filter(pk="secretary").aupdate(max_tools=0, max_answer_tokens=0)
    await _frames(str(session.pk), "And Spain?")
    assert llm.requests[-1]["options"]["num_predict"] == 4096
