"""Issue 57's final figures from the reports beside this file: per split the three runs (dev:
memory and two-part tasks apart; held-out: counts only, and where each new repair group fired),
then each new group switched off (off/offN-SPLIT-GROUP.json: the tasks where it fired in run 1),
against the same tasks in the three runs with it on."""
import glob
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))


def rows(path):
    return [r for r in json.load(open(path))["results"] if r["mode"] == "navi"]


def ok(r):
    return str(r["success"]) == "True"


def line(name, counts, total):
    pct = [100 * c / total for c in counts]
    print(f"{name:28} {' '.join(f'{c:2}/{total}' for c in counts)}   mean {statistics.mean(pct):5.1f} %"
          f"  (spread {min(pct):.1f}–{max(pct):.1f})")


runs = {split: [rows(p) for p in sorted(glob.glob(os.path.join(HERE, f"{split}-run*.json")))] for split in ("heldout", "dev")}
held = runs["heldout"]
line("held-out, all", [sum(map(ok, rs)) for rs in held], len(held[0]))
line("held-out, two-step", [sum(ok(r) for r in rs if r["two_step"]) for rs in held], sum(r["two_step"] for r in held[0]))
dev = runs["dev"]
for kind, prefix in (("dev memory", "dev_mem_"), ("dev two-part", "dev_two_")):
    line(kind, [sum(ok(r) for r in rs if r["task"].startswith(prefix)) for rs in dev],
         sum(r["task"].startswith(prefix) for r in dev[0]))
fresh = ("dev_two_tickets_file", "dev_two_library_todo", "dev_two_boiler_line")
line("dev two-part, fresh three", [sum(ok(r) for r in rs if r["task"] in fresh) for rs in dev], 3)
print()
for split, rs_list in runs.items():
    groups = sorted({g for rs in rs_list for r in rs for g in (r.get("guards_fired") or {})})
    for g in groups:
        cells = []
        for rs in rs_list:
            hit = [r for r in rs if g in (r.get("guards_fired") or {})]
            cells.append(f"{sum(map(ok, hit))}/{len(hit)}")
        print(f"{split:7} {g:9} fired in (succeeded/tasks) " + ", ".join(cells))
print()
for path in sorted(glob.glob(os.path.join(HERE, "off", "off*-*.json"))):
    n, split, group = os.path.basename(path)[3:-5].split("-", 2)
    off = rows(path)
    names = {r["task"] for r in off}
    on = [sum(ok(r) for r in rs if r["task"] in names) for rs in runs[split]]
    print(f"{group:6} off, {split:7} run {n}: {sum(map(ok, off))}/{len(off)}   on (runs 1–3): "
          + ", ".join(f"{c}/{len(off)}" for c in on))
