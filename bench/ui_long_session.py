"""Benchmark: the chat page opening a 5 000-message session (tool cards, code blocks) in
Chromium → ms from navigation to the last message visible and to the input being usable, then
a scroll through the whole history with the long tasks (> 50 ms) it caused.

Run: .venv/bin/python bench/ui_long_session.py   (a live Navi server on a temp SQLite DB and
Debian's /usr/bin/chromium; prints figures, asserts nothing)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser_support import chromium_browser, log_in, screenshot  # noqa: E402
from tests.live_server import LiveNavi  # noqa: E402
from tests.llm_server import LLMServer  # noqa: E402

MESSAGES = 5000
RUNS = 5

# Rows are written straight into the live server's database (4 rows per exchange).
SEED = """
import json
from sessions_app.models import Message, Session
session = Session.objects.get(pk="{sid}")
code = "```python\\ndef step_{{i}}(x):\\n    # square and add\\n    return x * x + {{i}}\\n```"
rows = []
for i in range({n} // 4):
    seq = i * 4
    rows.append(Message(session=session, seq=seq + 1, role="user", content=f"Question {{i}}: how do I compute step {{i}}?"))
    rows.append(Message(session=session, seq=seq + 2, role="assistant", content="",
        tool_calls=[{{"id": f"call_{{i}}", "name": "list_tools", "arguments": {{"page": i}}}}]))
    rows.append(Message(session=session, seq=seq + 3, role="tool", content=f"tool output {{i}}\\n" * 5,
        tool_call_id=f"call_{{i}}", name="list_tools"))
    rows.append(Message(session=session, seq=seq + 4, role="assistant",
        content=f"Here is **step {{i}}** with a [link](https://example.org/{{i}}):\\n\\n" + code.format(i=i) + "\\n\\n- one\\n- two"))
Message.objects.bulk_create(rows, batch_size=1000)
print(Message.objects.filter(session=session).count())
"""

LONGTASKS = """
window.__longtasks = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longtasks.push({start: e.startTime, duration: e.duration});
}).observe({type: 'longtask', buffered: true});
"""

LAST_VISIBLE = """() => {
  const groups = document.querySelectorAll('.messages > .group');
  const last = groups[groups.length - 1];
  if (!last || document.body.dataset.ready !== '1') return false;
  const r = last.getBoundingClientRect(), s = document.querySelector('#scroller').getBoundingClientRect();
  return r.height > 0 && r.top < s.bottom && r.bottom <= s.bottom + 1 ? performance.now() : false;
}"""

INPUT_USABLE = """() => {
  const input = document.querySelector('#input');
  return document.body.dataset.ready === '1' && !input.disabled && window.navi.socket.ws.readyState === 1
    ? performance.now() : false;
}"""

SCROLL_TO_TOP = """async () => {
  const s = document.querySelector('#scroller');
  const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  const t0 = performance.now();
  let steps = 0;
  while (steps < 20000) {
    s.scrollTop = Math.max(0, s.scrollTop - 1200);
    await frame();
    steps += 1;
    if (s.scrollTop === 0 && document.querySelector('.older').textContent.startsWith('Start')) break;
  }
  return {ms: performance.now() - t0, steps, groups: document.querySelectorAll('.messages > .group').length, t0};
}"""


def main() -> None:
    with LLMServer() as llm, LiveNavi(env={"OLLAMA_HOST": llm.url}) as navi:
        sid = navi.create_session()
        count = navi._manage("shell", "-c", SEED.format(sid=sid, n=MESSAGES)).strip().splitlines()[-1]
        print(f"session {sid}: {count} messages")
        with chromium_browser() as browser:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            log_in(page, navi)
            page.add_init_script(LONGTASKS)
            visible, usable, load_tasks = [], [], []
            for _ in range(RUNS):
                page.goto(f"{navi.url}/#{sid}")
                page.reload()  # a cold open of that session (same-URL hash navigation does not load)
                visible.append(page.wait_for_function(LAST_VISIBLE, polling="raf", timeout=30_000).json_value())
                usable.append(page.wait_for_function(INPUT_USABLE, polling="raf", timeout=30_000).json_value())
                load_tasks.append(max([t["duration"] for t in page.evaluate("window.__longtasks")] or [0]))
            screenshot(page, "bench-long-session")
            scroll = page.evaluate(SCROLL_TO_TOP)
            tasks = [t["duration"] for t in page.evaluate("window.__longtasks") if t["start"] >= scroll["t0"]]
            context.close()
    print(f"navigation → last message visible: median {statistics.median(visible):.0f} ms, max {max(visible):.0f} ms (target ≤ 1500)")
    print(f"navigation → input usable:         median {statistics.median(usable):.0f} ms, max {max(usable):.0f} ms (target ≤ 1500)")
    print(f"longest task while loading:        median {statistics.median(load_tasks):.0f} ms")
    print(f"scroll to the first message: {scroll['ms']:.0f} ms, {scroll['steps']} steps, {scroll['groups']} groups rendered")
    print(f"long tasks while scrolling: {len(tasks)}, longest {max(tasks or [0]):.0f} ms, over 200 ms: {sum(t > 200 for t in tasks)}")


if __name__ == "__main__":
    main()
