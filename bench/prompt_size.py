"""How many tokens the first turn of a new chat costs, part by part, on a real server.

Builds the first request of the default profile exactly as Navi sends it (system prompt, the
user's message, and the tools: native schemas, or the constrained step's catalogue), renders it
with the server's own chat template (llama.cpp's `POST /apply-template`) and counts it with the
server's tokenizer (`POST /tokenize`); each part of the system prompt is counted alone too.

    .venv/bin/python bench/prompt_size.py --server http://127.0.0.1:8095 [--profile secretary]
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httpx
from _django import setup


def count(client: httpx.Client, text: str) -> int:
    response = client.post("/tokenize", json={"content": text})
    response.raise_for_status()
    return len(response.json()["tokens"])


def rendered(client: httpx.Client, body: dict) -> int:
    response = client.post("/apply-template", json=body)
    response.raise_for_status()
    return count(client, response.json()["prompt"])


async def build(profile_id: str, mode: str) -> tuple[dict, dict[str, str]]:
    """(the request body, the system prompt's parts) of a new chat's first call in `mode`."""
    from django.conf import settings

    from agent.context import prompts
    from agent.llm.messages import ChatMessage
    from agent.llm.openai_backend import _request_body
    from agent.models import Profile
    from agent.registry import get_agent
    from agent.toolcalling import toolselect
    from agent.toolcalling.prompts import catalogue

    profile = await Profile.objects.aget(pk=profile_id)
    tools = get_agent().tools.tools_for(profile.enabled_tools, None, profile.id)
    catalogue = catalogue(tools) if mode == "constrained" else ""
    history = [ChatMessage(role="user", content="Please remember that my favourite colour is teal.")]
    context = await prompts.build_context(profile, history, None, memory_summary="", tools_text=catalogue)
    schemas = None if mode == "constrained" else toolselect.schemas(tools, compact_form=profile.compact_schemas)
    body = _request_body(context, schemas, "m", profile.temperature, None)
    parts = {
        "persona (NAVI_PERSONA)": settings.NAVI_PERSONA,
        f"profile prompt ({profile.id})": profile.system_prompt,
        "tool catalogue (constrained step)": catalogue,
        "clock line": context[0].content.rsplit("---", 1)[-1],
    }
    if schemas:
        parts["tool schemas (native, as JSON)"] = json.dumps(schemas)
    return body, parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="http://127.0.0.1:8095", help="a llama.cpp server (llama-server)")
    ap.add_argument("--profile", default="")
    args = ap.parse_args()
    setup()
    from django.conf import settings

    profile = args.profile or settings.NAVI_DEFAULT_PROFILE
    with httpx.Client(base_url=args.server, timeout=60) as client:
        for mode in ("native", "constrained"):
            body, parts = asyncio.run(build(profile, mode))
            print(f"\n{profile}, {mode}: the whole first prompt, as the server renders it: {rendered(client, body)} tokens")
            for name, text in parts.items():
                if text:
                    print(f"  {name:40} {count(client, text):5}")


if __name__ == "__main__":
    main()
