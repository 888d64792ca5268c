"""`python -m knowledge_app.parse_child PATH KIND SPOOL MAX_PASSAGES DOCX_XML_MAX_MB`: one upload read into its
passages in a process of its own, under the limits its parent set (jobs_app.child: address
space, CPU time; the parent keeps the wall clock). No Django, no database: the passages go to
SPOOL as JSON lines `[text, location, repeated]` (written to SPOOL.part, renamed when complete);
stdout says `progress F` as it reads and, last, `done N`, `error <json reason>` or `memory`.

`repeated` marks a passage whose text came earlier in the document (a running header, a
boilerplate line): it is kept for search by words but gets no vector of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from jobs_app.child import PROGRESS, apply_own_limits
from knowledge_app import extract  # stdlib only at import: lxml and pypdf come once the limits are set

PROGRESS_EVERY_S = 0.25


def write_spool(path: str, kind: str, spool: str, max_passages: int, docx_xml_max_mb: int) -> int:
    extract.DOCX_XML_MAX = docx_xml_max_mb * 1024 * 1024
    state = {"at": 0.0}

    def progress(fraction: float) -> None:
        now = time.monotonic()
        if now - state["at"] >= PROGRESS_EVERY_S:
            state["at"] = now
            print(f"{PROGRESS}{fraction:.4f}", flush=True)

    seen: set[bytes] = set()
    count = 0
    part = spool + ".part"
    with open(part, "w", encoding="utf-8") as out:
        for text, location in extract.passages(extract.pieces(Path(path), kind, progress)):
            count += 1
            if count > max_passages:
                raise extract.ExtractError(
                    f"the document has more than {max_passages} passages of text; split it into smaller files "
                    "(or raise KNOWLEDGE_MAX_PASSAGES)")
            digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
            repeated = digest in seen
            seen.add(digest)
            out.write(json.dumps([text, location, repeated], ensure_ascii=False) + "\n")
    os.replace(part, spool)
    return count


def main(argv: list[str]) -> int:
    apply_own_limits()
    path, kind, spool, max_passages, docx_max = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    try:
        try:
            count = write_spool(path, kind, spool, max_passages, docx_max)
        except extract.ExtractError as exc:
            if "Memory allocation failed" in str(exc):  # libxml2's words for a failed malloc
                raise MemoryError from exc
            print("error " + json.dumps(str(exc)), flush=True)
            return 3
    except MemoryError:
        print("memory", flush=True)
        return 4
    print(f"done {count}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
