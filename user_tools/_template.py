# Tool template — copy this file, rename it (no leading _), fill in the fields.
#
# No imports needed. Just define these four things at module level:
#
# name        — unique identifier (string), must equal the file name without .py
# description — when and why to use this tool (the LLM reads this to decide)
# parameters  — JSON Schema object describing the arguments
# execute     — async function that receives params dict and returns a string
#
# Files starting with _ (like this one) are never loaded. After saving, call reload_tools (or
# use write_tool, which checks, saves and reloads in one step). The tool is available from the
# NEXT message, in every profile, unless the owner disables it in the admin (Tools → User tools).
#
# Each call runs in its own sandboxed Python process (cwd = the user's workspace), so a crash or
# an endless loop only fails that call; it is stopped after TOOL_TIMEOUT_S seconds. The sandbox
# has no network unless the file sets `network = True`. Data files go next to the tool:
# os.path.join(os.path.dirname(__file__), "example_data.json") is in the tool's own writable
# data folder (user_tools/.data/<name>/<user id>/, also $NAVI_TOOL_DATA).

name = "example"
description = (
    "One sentence: what this tool does and when to use it. "
    "Be specific — the model reads this to decide whether to call the tool."
)
parameters = {
    "type": "object",
    "properties": {
        "input": {
            "type": "string",
            "description": "What this parameter is for",
        },
        # add more parameters here
    },
    "required": ["input"],
}
# network = True  # uncomment if execute() needs the network (web APIs)


async def execute(params: dict) -> str:
    value = params["input"]

    # --- your implementation here ---
    result = f"processed: {value}"

    return result

    # To signal failure, raise an exception:
    # raise ValueError("something went wrong")
