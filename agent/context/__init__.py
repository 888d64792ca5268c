"""What a model call is sent: the chat's conversation, loaded and saved row by row
(`conversation`), the system prompt (`prompts`), the turn's clock (`clock`), the facts the
request recalls (`recall`), the sources an answer cites (`citations`) and the window it must
fit (`window`).
May import frames, llm and models only."""
