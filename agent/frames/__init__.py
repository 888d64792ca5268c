"""What the page is sent: one dataclass per server frame (`events`), the channel-layer groups frames
travel through (`groups`), and a push to the owner's devices when no tab shows the chat (`notices`).
May import llm and models only; every room above may import it."""
