"""Slip: a small model's file path that plainly means a file the request names — a name grown a
prefix ("file_log.txt"), folders from the root nobody said ("/path/to/config.json"), a
placeholder folder — or, in a planned step, a write to the file an earlier step only read.
"""

from __future__ import annotations

import re

from agent.llm.messages import ToolCall
from agent.toolcalling import toolselect

FILE_ACTIONS = ("read", "write", "append")


def fix_path(call: ToolCall, request: str) -> bool:
    """A small model's file path put right where it plainly meant a file the request names:
    "file_log.txt" for "the file log.txt" (the name grown a prefix), "/path/to/config.json" for
    "config.json" (folders from the root that the request never says), or a placeholder such as
    "/path/to/documents" (no file name at all) when the request names exactly one file. True
    when the path was changed."""
    args = call.arguments if isinstance(call.arguments, dict) else {}
    path = args.get("path")
    if not isinstance(path, str) or args.get("action") not in FILE_ACTIONS:
        return False
    names = toolselect.file_names(request)
    folder, _, base = path.rstrip("/").rpartition("/")
    if path.startswith("/") and base.lower() in {n.lower() for n in names if "/" not in n}:
        # "/path/to/config.json" for "Create a file config.json": folders nobody said, from root.
        said = request.lower()
        if not all(part.lower() in said for part in folder.strip("/").split("/") if part):
            call.arguments = {**args, "path": next(n for n in names if n.lower() == base.lower())}
            return True
    if not names or any(path.lower() == n.lower() or path.lower().endswith("/" + n.lower()) for n in names):
        return False
    grown = [n for n in names if re.search(rf"[_-]{re.escape(n.rpartition('/')[2])}$", base, re.I)]
    if grown:
        named = grown[0]
        fixed = named if "/" in named or not folder else f"{folder}/{named}"
    elif "." not in base and len(names) == 1:
        fixed = names[0]
    else:
        return False
    call.arguments = {**args, "path": fixed}
    return True


WRITES = ("write", "append")


def fix_path_for_part(call: ToolCall, request: str, part: str, done: list[ToolCall]) -> bool:
    """In a planned step whose part names one file ("write the value … into timeout.txt"), a
    write to another file the request names that an earlier step's call already touched (the
    settings.json it said to read: a 0.5B model wrote over it) goes to the part's file. True
    when the path was changed."""
    args = call.arguments if isinstance(call.arguments, dict) else {}
    path = args.get("path")
    here = toolselect.file_names(part)
    if not isinstance(path, str) or args.get("action") not in WRITES or len(here) != 1:
        return False
    elsewhere = {n.lower() for n in toolselect.file_names(request)} - {here[0].lower()}
    touched = {str(c.arguments.get("path", "")).strip("./").lower() for c in done if isinstance(c.arguments, dict)}
    if path.strip("./").lower() not in elsewhere & touched:
        return False
    call.arguments = {**args, "path": here[0]}
    return True
