"""A message's `mcp_resources` (`[{"server_id", "uri"}]`, the WebSocket `message` frame and the
REST message body): each resource read from the owner's server and appended to the message as
untrusted data, so the chat is tainted like after an outside tool result."""

from __future__ import annotations

import json

from agent.trust.policy import wrap_untrusted
from navi_project.hop import db_hop
from tools_app.mcp.attach import Attached, AttachError, read_listed, visible_server

MAX_RESOURCES = 3

__all__ = ["AttachError", "MAX_RESOURCES", "resource_blocks"]


def source_of(attached: Attached) -> str:
    """The untrusted block's source; the page reads server and URI back out of it for the chip."""
    return f"the MCP resource {json.dumps(attached.uri)} of server {json.dumps(attached.server)}"


def block(attached: Attached) -> str:
    text = attached.text or "(the resource has no text)"
    notes = []
    if attached.cut:
        notes.append(f"[cut at {len(attached.text)} characters (MCP_MAX_RESULT_CHARS)]")
    if attached.skipped:
        notes.append(f"[{attached.skipped} binary part(s) not attached]")
    body = "\n".join([text, *notes])
    return "\n\n" + wrap_untrusted(body, source_of(attached))


async def resource_blocks(user_id: int, value: object) -> str:
    """The text appended to the message for `value` ("" when none); AttachError when one is
    refused (another user's server, a URI it does not list, the server down)."""
    if value is None or value == []:
        return ""
    if not isinstance(value, list) or len(value) > MAX_RESOURCES:
        raise AttachError(f'mcp_resources must be a list of at most {MAX_RESOURCES} {{"server_id", "uri"}} objects')
    blocks = []
    for ref in value:
        if not isinstance(ref, dict) or set(ref) != {"server_id", "uri"}:
            raise AttachError('each entry of mcp_resources must be {"server_id": <number>, "uri": "<resource uri>"}')
        server = await db_hop(visible_server, user_id, ref["server_id"])
        blocks.append(block(await read_listed(server, ref["uri"])))
    return "".join(blocks)
