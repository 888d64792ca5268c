"""Who may run a tool call: per-profile policy and the wrapping of untrusted content (`policy`), a
run's guard and the owner's approvals (`approvals`).
May import context, frames, llm and models; toolcalling, turn and the rooms above import it."""
