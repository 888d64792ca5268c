"""One turn of the agent: `loop` (Agent: the turn's steps in order), `setup` (what the turn uses of
the profile in force), `turns` (one LLM call, streamed and saved), `constrained` (the
schema-constrained step), `repairs` (a small model's call put right with a call of its own: the
ledger is agent/toolcalling/README.md), `planning`, `ending` (the answer or the give-up),
`stopping`, `subagent` (a sub-agent's events to its parent), `runaway` (an answer that repeats
itself is cut), the work around a turn (`workers`, `compression`, `titles`) and the `reflect` tool.
May import toolcalling, trust, context, frames, llm and models; never runs, memory or web."""
