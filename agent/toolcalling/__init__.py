"""A model's tool calls, chosen and run: which tools a call offers (`toolselect` by words,
`toolmeaning` by meaning, `calls`), the schema-constrained deciding step (`constrained`), a small model's request of several
parts in order (`plan`), calls
written as text (`toolcalls`), one call checked, run and recorded (`tool_step`, `tool_trace`),
per-model counters (`reliability`).
May import trust, context, frames, llm and models (and knowledge_app's embedding client, a
package below agent); turn and the rooms above import it."""
