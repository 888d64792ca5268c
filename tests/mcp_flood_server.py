"""A hostile MCP server written on raw JSON-RPC (no SDK, so nothing on its side limits it): its
tool `flood` answers with a body of --mb megabytes, streamed in chunks (HTTP chunked JSON, one
SSE event with --sse, or one stdio line with --stdio); `small` answers normally and `slow`
waits until released, noting how many calls it holds at once in the --marker file; `peek`,
`wipe` and `tasky` carry tool annotations and taskSupport "required".

Run: python tests/mcp_flood_server.py --port N [--sse] | --stdio; prints "ready" on HTTP."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

CHUNK = b"A" * (1024 * 1024)
TOOLS = [
    {"name": "flood", "description": "A huge answer.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "small", "description": "A small answer.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "slow", "description": "Waits until released.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "peek", "description": "Reads only.", "inputSchema": {"type": "object", "properties": {}},
     "annotations": {"readOnlyHint": True}},
    {"name": "wipe", "description": "Deletes things.", "inputSchema": {"type": "object", "properties": {}},
     "annotations": {"readOnlyHint": False, "destructiveHint": True}},
    {"name": "tasky", "description": "Only as a task.", "inputSchema": {"type": "object", "properties": {}},
     "execution": {"taskSupport": "required"}},
]


class State:
    def __init__(self, args) -> None:
        self.args = args
        self.active = 0
        self.release = asyncio.Event()

    def note(self, line: str) -> None:
        if self.args.marker:
            with open(self.args.marker, "a") as handle:
                handle.write(line + "\n")


def answer(message: dict) -> dict | None:
    """The reply to anything but tools/call (None for notifications)."""
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "flood", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def flood_parts(ident, megabytes: int):
    head = json.dumps({"jsonrpc": "2.0", "id": ident}).encode()[:-1]
    yield head + b', "result": {"content": [{"type": "text", "text": "'
    for _ in range(megabytes):
        yield CHUNK
    yield b'"}]}}'


async def slow(state: State, ident) -> dict:
    state.active += 1
    state.note(f"slow active {state.active}")
    await state.release.wait()
    state.active -= 1
    return {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "released"}]}}


def small(ident) -> dict:
    return {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "small"}]}}


# --- HTTP -----------------------------------------------------------------------------------------
async def handle_http(state: State, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            request_line = await reader.readline()
            if not request_line:
                return
            method = request_line.split()[0].decode()
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
            if method != "POST":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                continue
            message = json.loads(body)
            if message.get("method") == "tools/call" and message["params"]["name"] == "flood":
                await send_flood(state, writer, message["id"])
                continue
            if message.get("method") == "tools/call":
                reply = await slow(state, message["id"]) if message["params"]["name"] == "slow" else small(message["id"])
            else:
                reply = answer(message)
            if reply is None:
                writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            else:
                data = json.dumps(reply).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s1\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(data), data))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def send_flood(state: State, writer: asyncio.StreamWriter, ident) -> None:
    kind = b"text/event-stream" if state.args.sse else b"application/json"
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: " + kind + b"\r\ntransfer-encoding: chunked\r\n\r\n")
    parts = flood_parts(ident, state.args.mb)
    if state.args.sse:
        parts = [b"event: message\ndata: ", *parts, b"\n\n"]
    sent = 0
    for part in parts:
        writer.write(b"%x\r\n%s\r\n" % (len(part), part))
        await writer.drain()
        sent += len(part)
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    state.note(f"flood sent {sent}")


# --- stdio ----------------------------------------------------------------------------------------
async def serve_stdio(state: State) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer

    def send(reply: dict) -> None:
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()

    async def call(message: dict) -> None:
        name = message["params"]["name"]
        if name == "flood":
            for part in flood_parts(message["id"], state.args.mb):
                out.write(part)
            out.write(b"\n")
            out.flush()
            state.note("flood sent")
        elif name == "slow":
            send(await slow(state, message["id"]))
        else:
            send(small(message["id"]))

    while line := await reader.readline():
        message = json.loads(line)
        if message.get("method") == "tools/call":
            asyncio.ensure_future(call(message))
        elif (reply := answer(message)) is not None:
            send(reply)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--sse", action="store_true")
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--marker", default="")
    args = parser.parse_args()

    async def run() -> None:
        state = State(args)
        if args.stdio:
            await serve_stdio(state)
            return
        server = await asyncio.start_server(lambda r, w: handle_http(state, r, w), "127.0.0.1", args.port)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    Path(args.marker).touch() if args.marker else None
    asyncio.run(run())


if __name__ == "__main__":
    main()
