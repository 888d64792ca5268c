"""The offered-tool rate at the first step, without a model: for every wording of every task of
bench/agent_eval.py, is a tool the task needs among those a small model's first constrained step
is offered? Reported per split (tuning / held-out), the way agent_eval's results files carry it.

    .venv/bin/python bench/tool_offer.py [--cap 8] [--json] [--show-heldout]

The selection is the one the loop uses (`agent.toolcalling.constrained.choose` over the built-in tools, as
agent_eval's navi profile enables them). Held-out misses are counted, not listed, unless
--show-heldout is given (an audit after tuning, never while tuning).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

WEB = "http://127.0.0.1:8000"


def offer_rates(cap: int, show_heldout: bool = False) -> dict:
    """{split: {"wordings", "offered", "rate", "misses"}} over every task's first message."""
    from _django import setup

    setup()
    from agent.registry import get_agent
    from agent.toolcalling import constrained
    from bench.agent_eval import ALL_TASKS

    registry = get_agent().tools
    tools = registry.tools_for(sorted(registry.builtin_names))
    out: dict[str, dict] = {}
    for task in ALL_TASKS:
        message = task.messages[0].format(web=WEB)
        offered = [t.name for t in constrained.choose(tools, message, cap, set())]
        part = out.setdefault(task.split, {"wordings": 0, "offered": 0, "misses": []})
        part["wordings"] += 1
        if set(task.needs) & set(offered):
            part["offered"] += 1
        elif task.split != "heldout" or show_heldout:
            part["misses"].append({"task": task.name, "needs": list(task.needs), "offered": offered})
    for part in out.values():
        part["rate"] = round(part["offered"] / part["wordings"], 3) if part["wordings"] else None
        if not part["misses"]:
            part.pop("misses")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cap", type=int, default=8, help="the profile's max_tools (agent_eval's --max-tools)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--show-heldout", action="store_true", help="list held-out misses too (audit only)")
    args = ap.parse_args()
    rates = offer_rates(args.cap, args.show_heldout)
    if args.json:
        print(json.dumps(rates))
        return
    for split in ("tuning", "heldout"):
        part = rates.get(split)
        if part:
            print(f"{split:8} offered at step 1: {part['offered']}/{part['wordings']} ({100 * part['rate']:.0f}%)")
            for miss in part.get("misses", []):
                print(f"    miss {miss['task']:28} needs {'/'.join(miss['needs'])}; offered {', '.join(miss['offered'])}")


if __name__ == "__main__":
    main()
