"""Prometheus metrics: every `navi_*` metric object, the one-line hooks the agent calls where
things happen, and `GET /metrics` (staff users or the `METRICS_TOKEN` bearer; 404 otherwise).

With several worker processes each has its own counters. When `PROMETHEUS_MULTIPROC_DIR` is set
(before the process starts: prometheus-client picks its storage at import), every process writes
its values to files there and `/metrics` on any worker sums them all, so a scrape through the
proxy shows the cluster's totals. `make run-cluster` sets it and empties it at start.
"""

from __future__ import annotations

import asyncio
import atexit
import hmac
import os
import time
from collections import deque

from django.conf import settings
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
PATH = "/metrics"

# --- runs -----------------------------------------------------------------------------------
RUNS_ACTIVE = Gauge("navi_runs_active", "Runs in flight (all workers)", multiprocess_mode="livesum")
RUNS_STARTED = Counter("navi_runs_started_total", "Runs started")
RUNS_FAILED = Counter("navi_runs_failed_total", "Runs that ended with an error frame")
RUNS_STOPPED = Counter("navi_runs_stopped_total", "Runs stopped by the owner")

# --- LLM calls (agent.llm.llmcalls records every one) ---------------------------------------------
LLM_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
LLM_CALL_SECONDS = Histogram(
    "navi_llm_call_duration_seconds", "Wall-clock time of one LLM call", ["backend", "model", "purpose"], buckets=LLM_BUCKETS
)
LLM_CALLS = Counter("navi_llm_calls_total", "LLM calls by outcome", ["backend", "model", "purpose", "outcome"])
LLM_TOKENS = Counter("navi_llm_tokens_total", "Tokens of LLM calls (kind: prompt | completion)", ["backend", "model", "kind"])

# --- tools, sockets, relay ------------------------------------------------------------------
TOOL_CALLS = Counter(
    "navi_tool_calls_total",
    "Tool calls by outcome (success, error, or the decision that kept it from running)",
    ["tool", "outcome"],
)
MCP_CALLS = Counter(
    "navi_mcp_calls_total",
    "MCP tool calls by server and outcome (ok, tool_error, error, unavailable, cancelled)",
    ["server", "outcome"],
)
WS_OPEN = Gauge("navi_websocket_connections", "Open session WebSockets (all workers)", multiprocess_mode="livesum")
WS_OPENED = Counter("navi_websocket_accepted_total", "Session WebSockets accepted")
RELAY_LAG = Histogram(
    "navi_relay_lag_seconds",
    "Time a run's frame waits between the agent loop producing it and the relay taking it to publish",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)

# --- routines (routines_app) ------------------------------------------------------------------
ROUTINE_RUNS = Counter("navi_routine_runs_total", "Routine slots by final status (ok, failed, missed...)", ["status"])
ROUTINE_LATENESS = Histogram(
    "navi_routine_lateness_seconds",
    "How long after its fire time a routine's run started",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600, 21600),
)


# --- hooks ----------------------------------------------------------------------------------
def routine_run(status: str) -> None:
    ROUTINE_RUNS.labels(status=status).inc()


def routine_started(lateness_s: float) -> None:
    ROUTINE_LATENESS.observe(max(0.0, lateness_s))


def run_started() -> None:
    RUNS_STARTED.inc()
    RUNS_ACTIVE.inc()


def run_finished(run) -> None:
    """agent.runs.manager.Run at its end (error / stopped flags set by the run manager)."""
    RUNS_ACTIVE.dec()
    if run.error:
        RUNS_FAILED.inc()
    elif run.stopped and not getattr(run, "shut_down", False):  # the server's shutdown is no one's Stop
        RUNS_STOPPED.inc()


def llm_call(call: dict) -> None:
    """The call record of LLMBackend.observer (agent.llm.llmcalls.observe)."""
    backend, model = str(call.get("backend") or "")[:32], str(call.get("model") or "")[:200]
    purpose = str(call.get("purpose") or "")[:32]
    LLM_CALLS.labels(backend, model, purpose, str(call.get("outcome") or "")[:16]).inc()
    LLM_CALL_SECONDS.labels(backend, model, purpose).observe(max(0, int(call.get("duration_ms") or 0)) / 1000)
    for kind in ("prompt", "completion"):
        tokens = max(0, int(call.get(f"{kind}_tokens") or 0))
        if tokens:
            LLM_TOKENS.labels(backend, model, kind).inc(tokens)


def tool_call(name: str, known: bool, verdict, success: bool) -> None:
    """One tool call as the loop ends it. A name the model made up is counted as "(unknown)"
    so a confused model cannot grow the label set without bound."""
    if verdict is not None and not verdict.run:
        outcome = str(verdict.record.decision)  # refused, denied, timed_out, cancelled
    else:
        outcome = "success" if success else "error"
    TOOL_CALLS.labels(name[:100] if known else "(unknown)", outcome).inc()


def mcp_call(server: str, outcome: str) -> None:
    """One call to an MCP server's tool (tools_app.mcp.tools)."""
    MCP_CALLS.labels(server[:40], outcome[:16]).inc()


def websocket_opened() -> None:
    WS_OPENED.inc()
    WS_OPEN.inc()


def websocket_closed() -> None:
    WS_OPEN.dec()


class RelayQueue(asyncio.Queue):
    """The run manager's outbox: remembers when each frame was put, and observes on `get` how
    long it waited (the relay's lag behind the model)."""

    def _init(self, maxsize: int) -> None:
        self._queue = deque()

    def _put(self, item) -> None:
        self._queue.append((time.monotonic(), item))

    def _get(self):
        put_at, item = self._queue.popleft()
        if item is not None:
            RELAY_LAG.observe(time.monotonic() - put_at)
        return item

    @staticmethod
    def observe_direct() -> None:
        """A frame published without waiting in the queue (nothing was before it)."""
        RELAY_LAG.observe(0.0)


# --- exposition -----------------------------------------------------------------------------
_collectors: list = []  # collectors apps add (jobs_app: navi_jobs_* read from the database)


def register_collector(collector) -> None:
    """Add a collector whose `collect()` runs at each scrape, in either mode (idempotent per class)."""
    if any(type(c) is type(collector) for c in _collectors):
        return
    _collectors.append(collector)
    if not MULTIPROC_DIR:
        REGISTRY.register(collector)


def exposition() -> bytes:
    """The text format: this process's metrics, or every process's when in multiprocess mode."""
    if MULTIPROC_DIR:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=MULTIPROC_DIR)
        for collector in _collectors:
            registry.register(collector)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


def is_metrics_token(authorization: str | None) -> bool:
    """Is this Authorization header `Bearer <METRICS_TOKEN>`? (constant-time compare)"""
    expected = settings.METRICS_TOKEN
    scheme, _, token = (authorization or "").partition(" ")
    return bool(expected) and scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


if MULTIPROC_DIR:  # a worker that exits leaves no "live" gauge values behind
    atexit.register(multiprocess.mark_process_dead, os.getpid(), MULTIPROC_DIR)
