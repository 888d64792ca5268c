"""Uploaded session files as the agent sees them."""

from __future__ import annotations

from .models import SessionFile


def describe_uploaded_files(session_id: str, files: list) -> str:
    """The `[Uploaded files on disk: ...]` block for files referenced in a message.

    Only files actually uploaded to this session are accepted (by name or stored path), so a
    client cannot make the agent believe an arbitrary path is an upload.
    """
    if not isinstance(files, list):
        raise ValueError('"files" must be a list of {"name", "path"} objects')
    rows = {f.name: f for f in SessionFile.objects.filter(session_id=session_id)}
    by_path = {f.path: f for f in rows.values()}
    lines = []
    for ref in files:
        if not isinstance(ref, dict):
            raise ValueError('each entry of "files" must be an object with "name" and "path"')
        row = rows.get(str(ref.get("name"))) or by_path.get(str(ref.get("path")))
        if row is None:
            raise ValueError(f"file {ref.get('name')!r} was not uploaded to this session; upload it first")
        lines.append(f"- {row.name} → {row.path}")
    if not lines:
        return ""
    return "\n\n[Uploaded files on disk:\n" + "\n".join(lines) + "]"
