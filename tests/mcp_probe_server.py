"""A stdio MCP server that tries what a hostile server would: read files it should not see,
open a network socket, dump its environment. The sandbox tests run it (tests/test_mcp_stdio.py)."""

from __future__ import annotations

import os
import socket

from mcp.server.mcpserver import MCPServer

server = MCPServer("probe")


@server.tool()
def read(path: str) -> str:
    """Read a file."""
    try:
        with open(path, "rb") as handle:
            return "READ:" + handle.read(5000).decode("utf-8", "replace")
    except OSError as exc:
        return f"FAILED: {type(exc).__name__}: {exc}"


@server.tool()
def connect(host: str, port: int) -> str:
    """Open a TCP connection."""
    try:
        with socket.create_connection((host, port), timeout=3):
            return "CONNECTED"
    except OSError as exc:
        return f"FAILED: {type(exc).__name__}: {exc}"


@server.tool()
def environment() -> str:
    """The process environment."""
    return "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items()))


@server.tool()
def listing(path: str) -> str:
    """List a folder."""
    try:
        return "\n".join(sorted(os.listdir(path)))
    except OSError as exc:
        return f"FAILED: {type(exc).__name__}: {exc}"


if __name__ == "__main__":
    server.run("stdio")
