"""Which small-model repair groups fired in each task (agent/toolcalling/guards/ledger.py), for
measuring what a group buys cheaply: run once with every guard on, then re-run only the tasks where
a group fired with that group off (`--only-from base.json --fired paths --guards-off paths`).

A turn keeps the groups that fired with its last assistant message (`meta["guards"]`); a task's
`guards_fired` sums them over its turns. A held-out task's counts are kept, its name is never
listed (counted, not read) unless --show-heldout.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable


def guards_fired(db: Path, session_id: str) -> dict[str, int]:
    """{group: count} summed over the session's assistant messages (Navi's own record of its turns)."""
    with sqlite3.connect(db, timeout=30) as conn:
        rows = conn.execute("SELECT meta FROM sessions_app_message WHERE session_id = ? AND role = 'assistant'",
                            (session_id.replace("-", ""),)).fetchall()
    counts: dict[str, int] = {}
    for (raw,) in rows:
        try:
            fired = (json.loads(raw) if isinstance(raw, str) else raw or {}).get("guards") or {}
        except (ValueError, AttributeError):
            continue
        for group, count in fired.items():
            counts[group] = counts.get(group, 0) + int(count)
    return counts


def fired_by_split(rows: list[dict], splits: Iterable[str], show_heldout: bool = False) -> dict[str, dict]:
    """Per split, per group that fired: in how many tasks, how often, and (not for a held-out
    split unless `show_heldout`) which tasks."""
    out: dict[str, dict] = {}
    for split in splits:
        groups: dict[str, dict[str, Any]] = {}
        for r in rows:
            if r.get("split", "tuning") != split:
                continue
            for group, count in (r.get("guards_fired") or {}).items():
                entry = groups.setdefault(group, {"tasks": 0, "fired": 0, "names": []})
                entry["tasks"] += 1
                entry["fired"] += count
                entry["names"].append(r["task"])
        if split == "heldout" and not show_heldout:
            for entry in groups.values():
                del entry["names"]
        if groups:
            out[split] = groups
    return out


def fired_lines(summary: dict[str, dict]) -> list[str]:
    """The table's lines under the tasks: per mode and split, each group and where it fired."""
    lines = []
    for mode, part in summary.items():
        for split, groups in (part.get("guards_fired") or {}).items():
            for group, entry in groups.items():
                where = ", ".join(entry["names"]) if "names" in entry else "(held out: counted, not read)"
                lines.append(f"guard {group} fired ({mode}, {split}): {entry['tasks']} tasks, {entry['fired']} times: {where}")
    return lines


def cell_mark(result: dict) -> str:
    """The cell's mark " gN": N repair groups fired in the run (none for a held-out run shown redacted)."""
    fired = result.get("guards_fired") or {}
    if not fired or (result.get("split") == "heldout" and "detail" not in result):
        return ""
    return f" g{len(fired)}"


def fired_tasks(report: dict, groups: Iterable[str], modes: Iterable[str] | None = None) -> list[str]:
    """The tasks of `report` (any of `modes`, default all) in which any of `groups` fired, in
    the report's order."""
    wanted, modes = set(groups), set(modes) if modes is not None else None
    names = [r["task"] for r in report.get("results", [])
             if (modes is None or r.get("mode") in modes) and wanted & set(r.get("guards_fired") or {})]
    return list(dict.fromkeys(names))
