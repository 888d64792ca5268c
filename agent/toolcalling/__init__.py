"""A model's tool calls, chosen and run. What every profile pays for:
- what a call offers: `toolselect` (by words), `toolmeaning` (by meaning), `calls` (what fits the window,
  the call tracker), `offering` (a constrained step's tools), `reliability` (per-model counters);
- the constrained step: `support` (does the server enforce schemas? probed once), `schema` (the
  step's schema, its decision read), `prompts` (catalogue, notes, the results prompt), `partial_json`;
- calls written as text: `toolcalls` (read), `callfilter` (held back on the stream);
- one call checked, run and recorded: `tool_step`, `tool_trace`.
What only a small model's (capped) profile pays for: `plan` (a request of several parts in order),
`progress` (what is left of a request), and `guards/`, the repairs of its known slips (the ledger:
README.md).
May import trust, context, frames, llm and models (and knowledge_app's embedding client, a
package below agent); turn and the rooms above import it."""
