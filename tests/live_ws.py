"""Helpers for tests that talk to real Navi server processes over WebSocket and HTTP.

Shared by the multi-worker and crash-recovery tests (and usable by benchmarks): a frame reader
with deadlines instead of sleeps, the rule that answers planning calls, and stream checks.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import websockets

from tests.live_server import LiveNavi
from tests.llm_server import Rule, Turn

TERMINAL = ("stream_end", "stream_stopped", "error")


def planning_rule() -> Rule:
    """Answers every planning call with DIRECT, so the test's own rules answer the turn."""
    return Rule(match="", system="planning step", turns=[Turn(content="DIRECT")])


def connect(navi: LiveNavi, session_id: str, query: str = ""):
    """A client socket; its queue is unbounded so a socket the test reads only partly never
    stops reading (websockets' backpressure would then stall its close for close_timeout)."""
    return websockets.connect(navi.ws_url(session_id, query), additional_headers=navi.headers, max_size=None, max_queue=None)


async def recv_frame(ws, timeout: float = 15) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def recv_until(ws, predicate, timeout: float = 20) -> list[dict]:
    """Frames up to and including the first one matching `predicate` (fails on the deadline)."""
    frames: list[dict] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no matching frame within {timeout}s; got {summarise(frames)}")
        frame = await recv_frame(ws, left)
        frames.append(frame)
        if predicate(frame):
            return frames


async def recv_run(ws, timeout: float = 20) -> list[dict]:
    """Frames until the run ends (stream_end / stream_stopped / a run error)."""
    return await recv_until(ws, lambda f: f["type"] in TERMINAL and "run_id" in f, timeout)


def deltas(frames: list[dict]) -> str:
    return "".join(f["delta"] for f in frames if f["type"] == "stream_delta")


def seqs(frames: list[dict]) -> list[int]:
    return [f["seq"] for f in frames if "seq" in f]


def summarise(frames: list[dict]) -> str:
    return ", ".join(f"{f.get('type')}#{f.get('seq', '-')}" for f in frames[-30:])


def assert_contiguous(frames: list[dict], first: int = 1) -> None:
    """Seqs are first..N with no gap, no duplicate, in order, all of one run."""
    got = seqs(frames)
    assert got == list(range(first, first + len(got))), f"seqs not contiguous from {first}: {got}"
    assert len({f["run_id"] for f in frames if "run_id" in f}) <= 1, "frames of several runs mixed"


def session_detail(navi: LiveNavi, session_id: str) -> dict:
    response = httpx.get(f"{navi.url}/sessions/{session_id}", headers=navi.headers, timeout=10)
    response.raise_for_status()
    return response.json()


def assistant_rows(navi: LiveNavi, session_id: str) -> list[dict]:
    return [m for m in session_detail(navi, session_id)["messages"] if m["role"] == "assistant"]


async def post(navi: LiveNavi, path: str, json_body: dict | None = None, timeout: float = 30) -> httpx.Response:
    async with httpx.AsyncClient(base_url=navi.url, headers=navi.headers, timeout=timeout) as client:
        return await client.post(path, json=json_body or {})

