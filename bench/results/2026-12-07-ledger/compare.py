"""The ledger figures of 2026-12-07: per guard group, success on the tasks where it fired, on (base1) / off (off1)."""
import json, glob, os
HERE = os.path.dirname(os.path.abspath(__file__))
base = {}
for split in ("tuning", "dev"):
    d = json.load(open(os.path.join(HERE, f"base1-{split}.json")))
    for r in d["results"]:
        base[(split, r["task"])] = str(r["success"]) == "True"
for f in sorted(glob.glob(os.path.join(HERE, "off1-*.json"))):
    _, split, group = os.path.basename(f)[:-5].split("-", 2)
    d = json.load(open(f))
    rows = [r for r in d["results"] if r["mode"] == "navi"]
    on = sum(base[(split, r["task"])] for r in rows)
    off = sum(str(r["success"]) == "True" for r in rows)
    print(f"{split:6} {group:9} tasks {len(rows):2}  on {on:2}  off {off:2}")
