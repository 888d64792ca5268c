"""Model Context Protocol: other programs' tools offered to Navi's model (client, tools,
service), and the checks every MCP server configuration passes (config)."""
