"""A small model's first choice of tool when it is asked for the name alone, from the whole
catalogue (issue 40 item 1: "a constrained first choice over the whole catalogue — an `enum` of
every tool name, described once in the cached system prompt — before a second constrained step
writes the chosen tool's arguments … Measure which wins").

    .venv/bin/python bench/first_choice.py --openai http://127.0.0.1:8095/v1 [--openai URL2 …] \
        --model qwen2.5-coder-0.5b-instruct [--json OUT]

For every task of bench/agent_eval.py (its first message), one call to an OpenAI-compatible
server under a JSON schema whose only field is `name`: one of every built-in tool the eval's navi
profile enables (or, with --offer CAP, those a capped step is offered), or "answer". The system prompt is the catalogue Navi writes for such a step
(`prompts.catalogue`: a line per tool with its parameters and first sentence). Printed: how
often the name is one of the tools the task needs (Task.needs), per split; held-out misses are
counted, not listed. The shipped design's figure to set beside it is agent_eval's "first call a
needed tool" (the first tool call of the run, after the words-and-meaning offer and the step).
Several --openai servers share the tasks (one request at a time each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

WEB = "http://127.0.0.1:8000"
SYSTEM = ("You are Navi, a personal assistant with tools. Choose the one tool that does the user's request, "
          "or answer when the request needs no tool. Reply with JSON: {\"name\": \"<tool or answer>\"}.")


def schema(names: list[str]) -> dict:
    return {"type": "object", "properties": {"name": {"type": "string", "enum": names}}, "required": ["name"],
            "additionalProperties": False}


async def choose(client: httpx.AsyncClient, url: str, model: str, system: str, message: str, names: list[str]) -> str:
    body = {
        "model": model, "temperature": 0, "max_tokens": 40, "stream": False,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": message}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "step", "strict": True, "schema": schema(names)}},
    }
    response = await client.post(f"{url.rstrip('/')}/chat/completions", json=body)
    response.raise_for_status()
    text = response.json()["choices"][0]["message"]["content"] or ""
    try:
        return str(json.loads(text).get("name", ""))
    except (ValueError, AttributeError):
        return ""


def prepare(offer: int) -> list[tuple]:
    """(task, the names its choice may take, the system prompt) for every task (Django set up
    here, outside the event loop). `offer`: only the tools a capped step of that many is offered
    (words and meaning, all-MiniLM-L6-v2 as in bench/tool_offer.py), not the whole catalogue."""
    from _django import setup

    setup()
    from agent.registry import get_agent
    from agent.toolcalling import offering, prompts, toolmeaning
    from agent.toolcalling.schema import ANSWER
    from bench.agent_eval import ALL_TASKS

    registry = get_agent().tools
    tools = registry.tools_for(sorted(registry.builtin_names))
    if offer:
        from tool_offer import _embedder

        _embedder()
        toolmeaning.REQUEST_TIMEOUT_S = toolmeaning.TOOLS_TIMEOUT_S = 600.0
    out = []
    for task in ALL_TASKS:
        shown = tools
        if offer:
            message = task.messages[0].format(web=WEB)
            shown = offering.choose(tools, message, offer, set(), asyncio.run(offering.meaning(tools, message, offer)))
        out.append((task, [t.name for t in shown] + [ANSWER], f"{SYSTEM}\n\n{prompts.catalogue(shown)}"))
    return out


async def run(urls: list[str], model: str, prepared: list[tuple]) -> list[dict]:
    tasks = [task for task, _, _ in prepared]
    queue: asyncio.Queue = asyncio.Queue()
    for item in prepared:
        queue.put_nowait(item)
    rows: list[dict] = []

    async def worker(url: str) -> None:
        async with httpx.AsyncClient(timeout=600) as client:
            while not queue.empty():
                task, names, system = queue.get_nowait()
                started = time.monotonic()
                chosen = await choose(client, url, model, system, task.messages[0].format(web=WEB), names)
                rows.append({"task": task.name, "split": task.split, "chosen": chosen, "right": chosen in task.needs,
                             "needs": list(task.needs), "s": round(time.monotonic() - started, 1)})
                print(f"  {len(rows):3}/{len(tasks)} {task.split:8} "
                      + (f"{task.name:30} {chosen}" if task.split != "heldout" else "(held out: counted, not read)")
                      + f"  {'ok' if chosen in task.needs else '-'}", flush=True)

    await asyncio.gather(*(worker(url) for url in urls))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--openai", action="append", required=True, metavar="URL", help="an OpenAI-compatible server (repeat for more)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--offer", type=int, default=0, metavar="CAP",
                    help="choose among a capped step's offer (words and meaning; PYTHONPATH=/tmp/benchlib) instead of every tool")
    ap.add_argument("--json", metavar="OUT", help="write the rows (held-out choices left out) and figures here")
    args = ap.parse_args()
    rows = asyncio.run(run(args.openai, args.model, prepare(args.offer)))
    figures = {}
    for split in ("tuning", "heldout"):
        part = [r for r in rows if r["split"] == split]
        figures[split] = {"tasks": len(part), "right": sum(r["right"] for r in part)}
        print(f"enum over {f'the offer (cap {args.offer})' if args.offer else 'the catalogue'}, {split:8}: first choice a needed tool {figures[split]['right']}/{len(part)} "
              f"({100 * figures[split]['right'] / max(1, len(part)):.0f}%)")
        if split == "tuning":
            for r in part:
                if not r["right"]:
                    print(f"    miss {r['task']:30} needs {'/'.join(r['needs'])}; chose {r['chosen'] or '(nothing)'}")
    if args.json:
        shown = [r if r["split"] != "heldout" else {k: r[k] for k in ("task", "split", "right", "s")} for r in rows]
        Path(args.json).write_text(json.dumps({"model": args.model, "figures": figures, "rows": shown}, indent=1))


if __name__ == "__main__":
    main()
