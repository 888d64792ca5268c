"""Where requests come in: the REST views and URLs, the chat's WebSocket (`consumers`, `routing`),
`/health` and Navi's own `/mcp` server; they start, steer and watch runs through agent.runs.
May import every room below it (memory, runs, registry, turn, toolcalling, trust, context, frames,
llm, models). Nothing in agent/ imports it except Django's wiring (management commands)."""
