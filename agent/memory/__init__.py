"""Memory extraction in the background: when stale chats are read for facts (`background`: on a new
chat, one call at a time, only while the owner is idle) and the LLM calls that turn a chat into facts
and the owner's summary (`extraction`); memory_app stores and searches them.
May import runs and every room below it; only web and Django's wiring import it."""
