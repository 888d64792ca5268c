"""Capture raw outputs of a model for tool-using prompts, to curate `tests/data/small_model_outputs.json`.

    .venv/bin/python bench/capture_outputs.py --openai http://127.0.0.1:8080/v1 --out /tmp/raw.json [--model M]

Each prompt is sent to `/v1/chat/completions`, not streamed, in up to three variants (`--variants`):
`native` with the tools in the request's `tools` (what Navi sends), `described` with no `tools`
and the same tools described in the system prompt as JSON (how a model without a tool template
sees them), `example` like `described` plus one worked example of a call. The raw message text
and any native tool calls are written out; the expected calls are filled in by hand afterwards.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOOLS = {
    "todo": {"type": "object", "properties": {
        "action": {"type": "string", "enum": ["set", "update", "read"]},
        "tasks": {"type": "array", "items": {"type": "string"}},
        "index": {"type": "integer", "minimum": 1},
        "status": {"type": "string", "enum": ["pending", "in_progress", "done", "failed", "skipped"]}},
        "required": ["action"]},
    "memory_save": {"type": "object", "properties": {
        "category": {"type": "string"}, "key": {"type": "string"}, "value": {"type": "string"}},
        "required": ["category", "key", "value"]},
    "filesystem": {"type": "object", "properties": {
        "action": {"type": "string", "enum": ["read", "write", "append", "list", "mkdir", "delete", "move", "search"]},
        "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["action", "path"]},
    "code_exec": {"type": "object", "properties": {"code": {"type": "string"}, "timeout": {"type": "number"}},
                  "required": ["code"]},
    "web_view": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
    "switch_profile": {"type": "object", "properties": {"profile_id": {"type": "string"}}, "required": ["profile_id"]},
}
DESCRIPTIONS = {
    "todo": "A checklist: action=set replaces the list with tasks; update sets the status of task number index.",
    "memory_save": "Remember a fact about the user (category, key, value).",
    "filesystem": "Read, write, append, list files in the workspace.",
    "code_exec": "Run a Python 3 program and return its output.",
    "web_view": "Open a web page and return its text.",
    "switch_profile": "Switch this session to another profile.",
}
PROMPTS = [
    ("Make a todo list with three tasks: buy milk, call the plumber, pay rent.", ["todo", "memory_save", "filesystem"]),
    ("On my todo list, mark task 2 as done.", ["todo", "filesystem"]),
    ("Please remember that my favourite colour is teal.", ["memory_save", "todo", "filesystem"]),
    ("Create a file named shopping.txt containing exactly: eggs, flour, sugar", ["filesystem", "code_exec"]),
    ("Append a new line saying 'finished' to the file log.txt.", ["filesystem"]),
    ("What is the code word in the file secret.txt?", ["filesystem", "web_view"]),
    ("Use code_exec to compute the sum of all integers from 1 to 12345.", ["code_exec", "filesystem"]),
    ("Open http://127.0.0.1:8000/zorblax.html and tell me how tall the Zorblax tower is.", ["web_view", "filesystem"]),
    ("Switch this session to the smart_home profile.", ["switch_profile", "todo"]),
    ("Create a file config.json with debug set to true and port set to 8080.", ["filesystem"]),
    ("Remember that my sister Anna's birthday is on 14 March, and add 'buy a gift' to my todo list.", ["memory_save", "todo"]),
    ("List the files in the reports folder.", ["filesystem", "code_exec"]),
]
SYSTEM = "You are Navi, a helpful assistant with tools. Use a tool when the request needs one."


def schema(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": DESCRIPTIONS[name], "parameters": TOOLS[name]}}


EXAMPLE = ('\nExample. User: "What is on my todo list?" You: {"name": "todo", "arguments": {"action": "read"}}'
           "\nAnswer with the tool call only, nothing else.")


def text_system(names: list[str], example: bool) -> str:
    listed = json.dumps([schema(n)["function"] for n in names])
    return (f"{SYSTEM}\nYou can call these tools: {listed}\n"
            'To call a tool, answer with a JSON object {"name": <tool name>, "arguments": {...}}.'
            + (EXAMPLE if example else ""))


def ask(client: httpx.Client, model: str, prompt: str, names: list[str], variant: str, max_tokens: int) -> dict:
    native = variant == "native"
    system = SYSTEM if native else text_system(names, example=variant == "example")
    body: dict = {"model": model, "temperature": 0.2, "max_tokens": max_tokens, "stream": False,
                  "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}]}
    if native:
        body["tools"] = [schema(n) for n in names]
    started = time.monotonic()
    response = client.post("/chat/completions", json=body)
    message = response.json()["choices"][0]["message"] if response.status_code == 200 else {"content": response.text}
    return {"model": model, "prompt": prompt, "variant": variant, "offered_tools": names,
            "output": message.get("content") or "", "native_calls": message.get("tool_calls") or [],
            "seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--openai", required=True, metavar="URL")
    ap.add_argument("--model", default="")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--variants", default="native,described,example")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with httpx.Client(base_url=args.openai.rstrip("/"), timeout=600) as client:
        model = args.model or client.get("/models").json()["data"][0]["id"]
        captured = []
        for prompt, names in PROMPTS:
            for variant in args.variants.split(","):
                captured.append(ask(client, model, prompt, names, variant.strip(), args.max_tokens))
                print(json.dumps(captured[-1])[:300], flush=True)
                Path(args.out).write_text(json.dumps(captured, indent=1, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
