"""A model's tool calls, chosen and run: which tools a call offers (`toolselect`, `calls`), the
schema-constrained deciding step (`constrained`), calls written as text (`toolcalls`), one call
checked, run and recorded (`tool_step`, `tool_trace`), per-model counters (`reliability`).
May import trust, context, frames, llm and models; turn and the rooms above import it."""
