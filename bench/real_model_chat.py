"""A real OpenAI-compatible server (llama.cpp's llama-server) through Navi's WebSocket.

    python bench/real_model_chat.py --openai http://127.0.0.1:8093/v1 [--model M]            # five questions
    python bench/real_model_chat.py --openai http://127.0.0.1:8093/v1 --replay [--rounds 3]  # Navi vs direct

Default (issue 41): five plain questions, one after another in one chat, with the profile's
`tool_calling` `auto` and then `native` (a new chat each), same server, same run: for each
question the first word and the whole answer, the LLM calls it made, and how many prompt tokens
the server read against those its prompt cache served (llama-server's `timings`: prompt_n,
cache_n), so a prefix that changed between turns shows as a cache miss.

Issue 57's first word (bench/README "the first word sooner"): `--questions 2 --modes auto
--embed-minilm DIR --titles model --direct` — France, then "And Italy?", through the default profile
as installed (a title call after the first answer), then the same two questions sent to the server
directly; `--guards-off plain` for the same without the small-model plain path, `--dump FILE` keeps
every request Navi sent.

`--replay`: one question through Navi and then directly with the very request Navi sent, back
to back: how much time Navi adds. A capturing proxy between Navi and the server records Navi's
request body; the direct call replays that body, so both sides make the server read the same
prompt. Between the two a tiny unrelated request evicts the server's prompt cache, so the direct
call is as cold as Navi's; "direct again" replays once more at once: the same prompt from the
cache. Needs a running server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tests.live_server import LiveNavi  # noqa: E402

QUESTION = "What is the capital of France? Answer in one short sentence."
QUESTIONS = [
    QUESTION,
    "And Italy?",
    "What is 12 times 12?",
    "Name one primary colour.",
    "Thank you! Say goodbye in one word.",
]


def capturing_proxy(upstream: str) -> tuple[ThreadingHTTPServer, list[dict]]:
    """Forwards every request to `upstream` (streaming the answer back) and keeps chat bodies,
    each with the server's `timings` of its answer under "_timings" when it reports them."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _forward(self, method: str) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
            body = None
            if raw and self.path.endswith("/chat/completions"):
                body = json.loads(raw)
                bodies.append(body)
            tail = b""
            with httpx.stream(method, upstream.rstrip("/") + self.path.removeprefix("/v1"), content=raw,
                              headers={"Content-Type": "application/json"}, timeout=900) as response:
                self.send_response(response.status_code)
                self.send_header("Content-Type", response.headers.get("content-type", "application/json"))
                self.end_headers()
                try:
                    for chunk in response.iter_raw():
                        tail = (tail + chunk)[-4096:]
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except OSError:  # Navi hung up (a stop, or a stream it cut)
                    pass
            if body is not None:
                body["_timings"] = _timings(tail)

        def do_GET(self):
            self._forward("GET")

        def do_POST(self):
            self._forward("POST")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, bodies


def _timings(tail: bytes) -> dict:
    """llama-server's `timings` of an answer (its last lines), {} when the server sends none."""
    for line in reversed(tail.decode("utf-8", "replace").splitlines()):
        if '"timings"' in line:
            try:
                return json.loads(line.removeprefix("data: ")).get("timings") or {}
            except ValueError:
                return {}
    return {}


async def through_navi(navi: LiveNavi, session_id: str, question: str = QUESTION) -> tuple[float, float, str]:
    """(first word, whole answer, the answer) of one message through the WebSocket."""
    async with websockets.connect(navi.ws_url(session_id), additional_headers=navi.headers, max_size=None) as ws:
        start = time.monotonic()
        first = None
        await ws.send(json.dumps({"type": "message", "content": question}))
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 900))
            if frame["type"] == "stream_delta" and first is None:
                first = time.monotonic() - start
            if frame["type"] == "approval_required":  # a plain question asks for no tool: denied
                await ws.send(json.dumps({"type": "approval", "approval_id": frame["approval_id"], "decision": "deny"}))
            if frame["type"] in ("stream_end", "error", "stream_stopped") and "run_id" in frame:
                if frame["type"] != "stream_end":
                    raise SystemExit(f"the run ended with {frame}")
                return first or 0.0, time.monotonic() - start, frame.get("content", "")


def evict(upstream: str, model: str) -> None:
    """One tiny unrelated request, so that the direct call reads its prompt cold as Navi's did
    (llama.cpp keeps the last prompt; replaying Navi's body right after it would be served from
    that cache and look ~100x faster than it is)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1}
    httpx.post(upstream.rstrip("/") + "/chat/completions", json=body, timeout=900)


def direct(upstream: str, body: dict) -> tuple[float, float]:
    start, first = time.monotonic(), None
    with httpx.stream("POST", upstream.rstrip("/") + "/chat/completions", json=body, timeout=900) as response:
        for line in response.iter_lines():
            if first is None and '"content":"' in line.replace(" ", "") and '"content":""' not in line.replace(" ", ""):
                first = time.monotonic() - start
    return first or 0.0, time.monotonic() - start


def direct_questions(upstream: str, model: str, asked: list[str]) -> None:
    """The questions sent to the server directly, one chat (each with the answers before it), the
    first from a cold cache (a tiny unrelated request evicts what Navi left): the model's own
    first word, to set Navi's beside."""
    evict(upstream, model)
    messages, firsts = [], []
    for number, question in enumerate(asked, 1):
        messages.append({"role": "user", "content": question})
        body = {"model": model, "messages": messages, "stream": True, "max_tokens": 256}
        start, first, text = time.monotonic(), None, ""
        with httpx.stream("POST", upstream.rstrip("/") + "/chat/completions", json=body, timeout=900) as response:
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                delta = ((json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}).get("content") or ""
                if delta and first is None:
                    first = time.monotonic() - start
                text += delta
        messages.append({"role": "assistant", "content": text})
        firsts.append(first or 0.0)
        print(f"{'direct':>7} {number:>2} {first or 0.0:>10.2f}s {time.monotonic() - start:>8.2f}s {1:>6} "
              f"{'':>12} {'':>11}  {' '.join(text.split())[:60]!r}")


def _purposes(navi: LiveNavi, session: str) -> list[str]:
    """The chat's LLM calls so far as Navi logged them (agent.models.LLMCall): purpose/outcome,
    in order (a chat's background calls, memory extraction or a title, are counted too)."""
    out = navi._manage("shell", "-c", "import json; from agent.models import LLMCall; print('PURPOSES', json.dumps(["
                       f"f'{{p}}/{{o}}' for p, o in LLMCall.objects.filter(session_id={session!r}).order_by('id')"
                       ".values_list('purpose', 'outcome')]))")
    return json.loads(out.split("PURPOSES ", 1)[1])


async def questions(navi: LiveNavi, bodies: list[dict], modes: list[str], asked: list[str]) -> None:
    """The plain questions in one chat per mode; one line per question."""
    print(f"{'mode':>7} {'#':>2} {'first word':>11} {'total':>9} {'calls':>6} {'prompt read':>12} {'from cache':>11}  answer")
    for mode in modes:
        navi._manage("shell", "-c", f"from agent.models import Profile; Profile.objects.update(tool_calling={mode!r})")
        with navi.api() as client:
            session = client.post("/sessions", json={"new": True}).json()["session_id"]
        firsts, purposes = [], []
        for number, question in enumerate(asked, 1):
            seen = len(bodies)
            first, total, answer = await through_navi(navi, session, question)
            made = bodies[seen:]
            deadline = time.monotonic() + 10  # the proxy notes a call's timings once its stream is closed
            while any("_timings" not in b for b in made) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            read = sum(b.get("_timings", {}).get("prompt_n", 0) for b in made)
            cached = sum(b.get("_timings", {}).get("cache_n", 0) for b in made)
            firsts.append(first)
            logged = _purposes(navi, session)
            print(f"{mode:>7} {number:>2} {first:>10.2f}s {total:>8.2f}s {len(made):>6} {read:>12} {cached:>11}  "
                  f"{' '.join(answer.split())[:60]!r}  [{', '.join(logged[len(purposes):])}]")
            purposes = logged
        print(f"{mode:>7} median first word {statistics.median(firsts):.2f} s; after the first question "
              f"{statistics.median(firsts[1:]):.2f} s")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--openai", required=True, help="the server's /v1 URL")
    ap.add_argument("--model", default="")
    ap.add_argument("--modes", default="auto,native", help="the profile's tool_calling modes, in order")
    ap.add_argument("--replay", action="store_true", help="Navi against the very request replayed directly")
    ap.add_argument("--rounds", type=int, default=3, help="--replay: questions, a new chat each")
    ap.add_argument("--questions", type=int, default=len(QUESTIONS),
                    help="ask only the first N of the five questions (2: issue 57's France, then Italy)")
    ap.add_argument("--max-tools", type=int, default=None,
                    help="set every profile's max_tools (0: a big model's profile; default: as installed)")
    ap.add_argument("--dump", default="", help="write every chat request Navi sent (JSON lines) to this file")
    ap.add_argument("--embed-minilm", default="", metavar="PACKAGES",
                    help="all-MiniLM-L6-v2 for meaning, as bench/agent_eval.py (the folder of its packages)")
    ap.add_argument("--titles", default="first_words", choices=("first_words", "model"),
                    help="CHAT_TITLES: model (an installed Navi's default: a title call after the first answer)")
    ap.add_argument("--guards-off", default="", metavar="GROUPS",
                    help="NAVI_GUARDS_OFF: small-model repair groups switched off (plain: a plain question takes a step)")
    ap.add_argument("--direct", action="store_true",
                    help="after Navi, the same questions sent to the server directly (no tools, no system prompt)")
    args = ap.parse_args()
    proxy, bodies = capturing_proxy(args.openai)
    proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
    env = {"OPENAI_BASE_URL": proxy_url, "OPENAI_MODEL": args.model or "default", "CHAT_TITLES": args.titles,
           "MEMORY_EXTRACTION_IDLE_S": "3600"}
    if args.guards_off:
        env["NAVI_GUARDS_OFF"] = args.guards_off
    if args.embed_minilm:
        from agent_eval import _minilm_server

        env.update(_minilm_server(args.embed_minilm))
    rows = []
    with LiveNavi(env=env) as navi:
        navi._manage("shell", "-c", "from agent.models import Profile; Profile.objects.update(llm_backend='openai', "
                                    "planning_enabled=False)")
        if args.max_tools is not None:
            navi._manage("shell", "-c", f"from agent.models import Profile; Profile.objects.update(max_tools={args.max_tools})")
        if not args.replay:
            await questions(navi, bodies, args.modes.split(","), QUESTIONS[: args.questions])
            proxy.shutdown()
            if args.dump:
                Path(args.dump).write_text("".join(json.dumps(body) + "\n" for body in bodies))
            if args.direct:
                direct_questions(args.openai, args.model or "default", QUESTIONS[: args.questions])
            if args.dump:
                Path(args.dump).write_text("".join(json.dumps(b) + "\n" for b in bodies))
            return
        for _ in range(args.rounds):
            with navi.api() as client:
                session = client.post("/sessions", json={"new": True}).json()["session_id"]
            seen = len(bodies)
            navi_first, navi_total, _answer = await through_navi(navi, session)
            answer_body = bodies[-1] if len(bodies) > seen else None
            if answer_body is None:
                raise SystemExit("Navi made no chat call through the proxy")
            answer_body = {k: v for k, v in answer_body.items() if k != "_timings"}
            evict(args.openai, answer_body["model"])  # the server's prompt cache now holds Navi's prompt
            direct_first, direct_total = direct(args.openai, answer_body)
            warm_first, _ = direct(args.openai, answer_body)
            rows.append((navi_first, navi_total, direct_first, direct_total, len(bodies) - seen, warm_first))
    proxy.shutdown()
    print(f"{'round':>5} {'navi first':>11} {'navi total':>11} {'direct first':>13} {'direct total':>13} "
          f"{'calls':>6} {'direct again, first':>20}")
    for i, (nf, nt, df, dt, calls, wf) in enumerate(rows, 1):
        print(f"{i:>5} {nf:>10.2f}s {nt:>10.2f}s {df:>12.2f}s {dt:>12.2f}s {calls:>6} {wf:>19.2f}s")
    print(f"median total: navi {statistics.median(r[1] for r in rows):.2f} s, "
          f"direct {statistics.median(r[3] for r in rows):.2f} s (same request body)")


if __name__ == "__main__":
    asyncio.run(main())
