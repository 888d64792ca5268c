"""Built-in tools, one module per area. The list of them is `tools_app.toolset.BUILTIN_TOOLS`."""
