"""Runs: `manager` (RunManager: one asyncio task per run, a chat claimed by one run at a time, frames
numbered, buffered for replay and sent to the chat's group, stop, notices at the end) and `startup`
(crash clean-up, runs stopped at shutdown).
May import the composition root (agent.registry) and every room below it; memory and web import it."""
