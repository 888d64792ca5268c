"""Markdown → Telegram HTML: everything escaped, only Telegram's tags put back and always
balanced, only http(s)/mailto links, and messages split within 4 096 UTF-16 units."""

from __future__ import annotations

from messaging_app.telegram.render import LIMIT, balanced, chunks, plain, to_html, utf16_len


def test_it_escapes_everything_and_keeps_only_telegram_tags():
    html = to_html("# Plan\n**bold** _it_ ~~gone~~ <img src=x onerror=alert(1)> & `a<b`\n- one")
    assert html == ("<b>Plan</b>\n<b>bold</b> <i>it</i> <s>gone</s> &lt;img src=x onerror=alert(1)&gt; &amp; "
                    "<code>a&lt;b</code>\n• one")


def test_it_links_only_web_and_mail_addresses():
    assert to_html('[x](https://a.example/?q="1"&b)') == '<a href="https://a.example/?q=&quot;1&quot;&amp;b">x</a>'
    assert to_html("[x](javascript:alert(1))") == "[x](javascript:alert(1))"


def test_code_blocks_keep_their_text_and_an_open_fence_runs_to_the_end():
    assert to_html("```py\nif a < b: **x**\n```") == '<pre><code class="language-py">if a &lt; b: **x**</code></pre>'
    assert to_html("look:\n```\nstill streaming <") == "look:\n<pre><code>still streaming &lt;</code></pre>"


def test_overlapping_markers_fall_back_to_plain_escaped_text():
    html = to_html("**a *b** c* <x>")
    assert balanced(html) and html == "**a *b** c* &lt;x&gt;"


def test_long_answers_are_split_within_the_limit_and_code_is_reopened():
    text = "intro\n```\n" + "\n".join(f"line {i} <>" for i in range(900)) + "\n```\noutro"
    parts = chunks(text)
    assert len(parts) > 1 and all(utf16_len(p) <= LIMIT and balanced(p) for p in parts)
    assert all("<pre><code>" in p for p in parts[1:-1])
    assert "\n".join(plain(p) for p in parts).count("line ") == 900
    emoji = chunks("😀" * 5000)
    assert all(utf16_len(p) <= LIMIT for p in emoji) and "".join(emoji) == "😀" * 5000
