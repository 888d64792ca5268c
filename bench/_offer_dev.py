"""Wordings for `bench/tool_offer.py --dev`: everyday requests written 2026-11-27 (fourth session)
to check the first step's offer on wordings neither split holds, without a model. Read freely
(they are no task of agent_eval, and no held-out): each is (request, the tools that would do it;
empty = no tool, a plain reply). Five come from issue 40's own examples of what failed from
outside; the rest were written for this list, with other data and words than the tasks'.
"""

from __future__ import annotations

DEV_WORDINGS: list[tuple[str, frozenset[str]]] = [
    (request, frozenset(tools)) for request, tools in [
        ("Jot down that the wifi password is in the drawer.", {"memory_save"}),
        ("Tick the first one off my to-do list.", {"todo"}),
        ("What's my passport number again?", {"memory_search"}),
        ("What's 17 times 23? Use Python.", {"code_exec"}),
        ("Things I need to do today: buy milk, call the plumber, pay rent.", {"todo"}),
        ("Which personas can you take on?", {"list_profiles"}),
        ("What's my car's licence plate?", {"memory_search"}),
        ("Add up all the whole numbers from 1 to 12345", {"code_exec"}),
        ("Keep a working note under 'status' saying deploy pending", {"scratchpad"}),
        ("Forget my old phone number.", {"memory_forget"}),
        ("Move report.txt into the archive folder.", {"filesystem"}),
        ("How many lines does server.log have?", {"filesystem", "terminal", "code_exec"}),
        ("Remind me every Monday at 9 to water the plants.", {"schedule_routine"}),
        ("Look up the weather in Lisbon.", {"web_search"}),
        ("Open the page http://x.test/a.html and summarise it.", {"web_view", "http_request"}),
        ("My sister's name is Ingrid, please keep that in mind.", {"memory_save"}),
        ("Do you know which gym I go to?", {"memory_search"}),
        ("Put 'renew insurance' on my checklist.", {"todo"}),
        ("Show me what's inside budget.csv.", {"filesystem"}),
        ("Make a folder called invoices.", {"filesystem"}),
        ("Compute the square root of 2 to 10 decimal places.", {"code_exec"}),
        ("Switch over to the coder persona.", {"switch_profile"}),
        ("What are you able to do?", {"list_tools"}),
        ("Get the JSON at http://api.test/v1/orders/7 and tell me its status.", {"http_request", "web_view"}),
        ("Delete old.log from the workspace.", {"filesystem"}),
        ("Search the web for cheap flights to Oslo.", {"web_search"}),
        ("Write 'call Anna' in the scratchpad section todo-later.", {"scratchpad"}),
        ("I no longer work at Siemens, forget that.", {"memory_forget"}),
        ("Run df -h in the shell.", {"terminal"}),
        ("What is the capital of France?", set()),
        ("Thanks, that's all for now!", set()),
        ("Tell me a joke about cats.", set()),
    ]
]
