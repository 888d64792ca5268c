"""Run-manager helpers that need no server."""

from __future__ import annotations

from agent.runs import merge_deltas


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


def test_other_frames_are_never_merged():
    frames = [{"type": "tool_call", "result": "1"}, {"type": "tool_call", "result": "2"}]
    assert merge_deltas(frames) == frames
