// A Node MCP server over stdio (the official TypeScript SDK, installed with server-everything)
// whose tool `fetch_url` fetches a URL with Node's own fetch() — the WebAssembly-based client
// that fails under an address-space (RLIMIT_AS) cap — and `eat`, which allocates. For
// tests/test_mcp_node.py.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "navi-node-fetch", version: "1.0.0" });
server.tool("fetch_url", "Fetch a URL and return its text.", { url: z.string() }, async ({ url }) => {
  const response = await fetch(url);
  return { content: [{ type: "text", text: `${response.status} ${await response.text()}` }] };
});
server.tool("eat", "Allocate and fill this many megabytes.", { mb: z.number() }, async ({ mb }) => {
  const kept = [];
  for (let n = 0; n < mb; n++) kept.push(Buffer.alloc(1024 * 1024, 1));
  return { content: [{ type: "text", text: `ate ${kept.length} MB` }] };
});
await server.connect(new StdioServerTransport());
