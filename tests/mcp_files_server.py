"""A stdio MCP server (the SDK's MCPServer) that writes and reads files, for tests/test_mcp_data.py:
`write`/`read` take a path; a relative one is in its HOME (its data folder in the sandbox)."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("navi-files")


def _where(path: str) -> Path:
    return Path(path) if path.startswith("/") else Path(os.environ["HOME"]) / path


@server.tool()
def write(path: str, text: str) -> str:
    """Write text to a file."""
    try:
        _where(path).write_text(text)
    except OSError as exc:
        return f"FAILED {type(exc).__name__}: {exc}"
    return f"wrote {_where(path)}"


@server.tool()
def read(path: str) -> str:
    """Read a file."""
    try:
        return _where(path).read_text()
    except OSError as exc:
        return f"FAILED {type(exc).__name__}: {exc}"


if __name__ == "__main__":
    server.run("stdio")
