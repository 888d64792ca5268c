"""Run-manager helpers that need no server."""

from __future__ import annotations

from agent.runs.manager import merge_deltas


def test_consecutive_deltas_of_one_kind_are_merged_in_order():
    frames = [
        {"type": "thinking_delta", "delta": "a"},
        {"type": "thinking_delta", "delta": "b"},
        {"type": "thinking_end"},
        {"type": "stream_delta", "delta": "Hel"},
        {"type": "stream_delta", "delta": "lo"},
        {"type": "tool_started", "tool": "x", "args": {}},
        {"type": "stream_delta", "delta": "!"},
        None,
    ]
    assert merge_deltas(frames) == [
        {"type": "thinking_delta", "delta": "ab"},
        {"type": "thinking_end"},
        {"type": "stream_delta", "delta": "Hello"},
        {"type": "tool_started", "tool": "x", "args": {}},
        {"type": "stream_delta", "delta": "!"},
        None,
    ]


def test_a_sub_agents_text_is_never_merged_into_the_answer():
    frames = [
        {"type": "stream_delta", "delta": "sub ", "is_subagent": True},
        {"type": "stream_delta", "delta": "text", "is_subagent": True},
        {"type": "stream_delta", "delta": "main"},
        {"type": "stream_delta", "delta": " answer"},
    ]
    assert merge_deltas(frames) == [
        {"type": "stream_delta", "delta": "sub text", "is_subagent": True},
        {"type": "stream_delta", "delta": "main answer"},
    ]


def test_other_frames_are_never_merged():
    frames = [{"type": "tool_call", "result": "1"}, {"type": "tool_call", "result": "2"}]
    assert merge_deltas(frames) == frames


class TestStartGate:
    """Runs started together take their first step (context and request, on the event loop) a
    few per turn of the loop, so the streams in flight are relayed between them."""

    @staticmethod
    async def _turns(counter: list[int], stop):
        while not stop.is_set():  # counts turns of the event loop
            counter[0] += 1
            await __import__("asyncio").sleep(0)

    async def test_a_start_on_a_quiet_loop_passes_at_once(self):
        from agent.runs.manager import _StartGate

        gate = _StartGate()
        step = gate.enter().__await__()
        try:
            next(step)
        except StopIteration:
            pass  # done in the first step: no turn of the loop waited
        else:
            raise AssertionError("a lone start waited for a turn of the event loop")

    async def test_many_starts_go_a_few_per_turn_in_order(self):
        import asyncio

        from agent.runs.manager import _StartGate

        gate, turn, stop, entered = _StartGate(), [0], asyncio.Event(), []

        async def start(i: int) -> None:
            await gate.enter()
            entered.append((i, turn[0]))

        ticker = asyncio.create_task(self._turns(turn, stop))
        await asyncio.wait_for(asyncio.gather(*(start(i) for i in range(7))), 10)
        stop.set()
        await ticker
        assert [i for i, _ in entered] == list(range(7))
        per_turn: dict[int, int] = {}
        for _, t in entered:
            per_turn[t] = per_turn.get(t, 0) + 1
        assert max(per_turn.values()) <= _StartGate.PER_TURN and len(per_turn) >= 4

    async def test_a_start_cancelled_while_waiting_leaves_the_line(self):
        import asyncio

        from agent.runs.manager import _StartGate

        gate = _StartGate()
        first = [asyncio.create_task(gate.enter()) for _ in range(_StartGate.PER_TURN)]
        waiting = asyncio.create_task(gate.enter())
        after = asyncio.create_task(gate.enter())
        await asyncio.sleep(0)  # the first take the turn's slots; the other two wait in line
        assert all(t.done() for t in first) and len(gate.waiting) == 2
        waiting.cancel()
        await asyncio.wait_for(after, 10)  # not held up by the cancelled one
        assert waiting.cancelled() and not gate.waiting
