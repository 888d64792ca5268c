"""Memory extraction in the background: the job that reads stale chats for facts (`tasks`: queued
by a new chat, run by a job worker, one call at a time, only while the owner is idle; its manners
in `background`) and the LLM calls that turn a chat into facts and the owner's summary
(`extraction`); memory_app stores and searches them.
May import runs and every room below it; only web and Django's wiring import it."""
