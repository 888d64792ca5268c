"""The ledger figures: per guard group, run and split, success on the tasks where it fired, with the
group on (baseN) and off (offN). Files: baseN-SPLIT[-PART].json (every group on; held-out in parts run
on two servers), offN-SPLIT-GROUP[-partial].json (that group off, only the tasks where it fired in
the base run of the same number). Held-out results are counts only (no texts were kept)."""
import glob
import json
import os
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))


def rows(path):
    return [r for r in json.load(open(path))["results"] if r["mode"] == "navi"]


def ok(r):
    return str(r["success"]) == "True"


base = {}  # (n, split, task) -> success
fired = defaultdict(set)  # (n, split, group) -> tasks where it fired
for path in glob.glob(os.path.join(HERE, "base*-*.json")):
    name = os.path.basename(path)[:-5]
    n, split = name[4], name.split("-")[1]
    for r in rows(path):
        base[(n, split, r["task"])] = ok(r)
        for group in r.get("guards_fired") or {}:
            fired[(n, split, group)].add(r["task"])

for (n, split) in sorted({(k[0], k[1]) for k in base}):
    tasks = [k for k in base if k[:2] == (n, split)]
    print(f"base{n} {split:7} {sum(base[k] for k in tasks):2} / {len(tasks)}")
print()
for path in sorted(glob.glob(os.path.join(HERE, "off*-*.json"))):
    name = os.path.basename(path)[:-5]
    n, (_, split, group) = name[3], name.split("-", 2)
    got = rows(path)
    on = sum(base[(n, split, r["task"])] for r in got)
    off = sum(ok(r) for r in got)
    where = len(fired.get((n, split, group.split("-")[0]), ()))
    print(f"run {n} {split:7} {group:15} tasks {len(got):2} (fired in {where:2})  on {on:2}  off {off:2}")
print()
for (n, split, group), tasks in sorted(fired.items()):
    print(f"base{n} {split:7} {group:9} fired in {len(tasks):2}")
