"""The model's Markdown as Telegram HTML: everything escaped, then only Telegram's own tags
(b, i, s, code, pre, a with an http(s)/mailto link) put back, always balanced; a part that
would not come out balanced is sent as plain escaped text. `chunks` splits at 4 096 characters."""

from __future__ import annotations

import html
import re

LIMIT = 4096  # Telegram's limit on a message's text, in UTF-16 code units

_FENCE = re.compile(r"^```([\w+-]*)[^\n]*$", re.M)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?://|mailto:)[^)\s]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])|(?<![\w_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\w_])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.M)
_BULLET = re.compile(r"^(\s*)[-*+]\s+", re.M)
_TAG = re.compile(r"<(/?)(\w+)[^>]*>")
_PLACEHOLDER = "\x00{}\x00"


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def escape(text: str) -> str:
    return html.escape(text, quote=False)


def balanced(markup: str) -> bool:
    stack: list[str] = []
    for closing, tag in _TAG.findall(markup):
        if not closing:
            stack.append(tag)
        elif not stack or stack.pop() != tag:
            return False
    return not stack


def _inline(text: str) -> str:
    """One stretch of prose (no fences) as Telegram HTML."""
    codes: list[str] = []

    def keep_code(match: re.Match) -> str:
        codes.append(f"<code>{escape(match.group(1))}</code>")
        return _PLACEHOLDER.format(len(codes) - 1)

    out = escape(_INLINE_CODE.sub(keep_code, text))
    out = _LINK.sub(lambda m: f'<a href="{html.escape(html.unescape(m.group(2)), quote=True)}">{m.group(1)}</a>', out)
    out = _HEADING.sub(lambda m: f"<b>{m.group(1)}</b>", out)
    out = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", out)
    out = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", out)
    out = _STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", out)
    out = _BULLET.sub(lambda m: f"{m.group(1)}• ", out)
    out = re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], out)
    return out if balanced(out) else re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], escape(_INLINE_CODE.sub(keep_code, text)))


def to_html(markdown: str) -> str:
    """Markdown → Telegram HTML; a fence left open (still streaming) runs to the end."""
    parts: list[str] = []
    pos = 0
    while True:
        opening = _FENCE.search(markdown, pos)
        if opening is None:
            parts.append(_inline(markdown[pos:]))
            break
        parts.append(_inline(markdown[pos:opening.start()]))
        closing = _FENCE.search(markdown, opening.end())
        body = markdown[opening.end():closing.start() if closing else len(markdown)].strip("\n")
        lang = opening.group(1)
        attr = f' class="language-{escape(lang)}"' if lang else ""
        parts.append(f"<pre><code{attr}>{escape(body)}</code></pre>")
        if closing is None:
            break
        pos = closing.end()
    return "".join(parts).strip()


def chunks(markdown: str, limit: int = LIMIT) -> list[str]:
    """The text as HTML messages of at most `limit`: cut between lines (a code block cut in two
    is closed and reopened), a line too long on its own between characters."""
    texts: list[str] = []
    current = ""
    fence = ""  # the open fence line while inside a code block
    for piece in _pieces(markdown, limit):
        if current and utf16_len(to_html(_closed(current + piece, fence))) > limit:
            texts.append(_closed(current, fence))
            current = f"{fence}\n" if fence else ""
        current += piece
        if _FENCE.match(piece.rstrip("\n")):
            fence = "" if fence else piece.rstrip("\n")
    if current:
        texts.append(current)
    return [html_text for html_text in (to_html(t) for t in texts) if html_text]


def _closed(text: str, fence: str) -> str:
    return text if not fence else text + ("```" if text.endswith("\n") else "\n```")


def _pieces(markdown: str, limit: int) -> list[str]:
    """Lines with their newline; a line longer than a message cut in parts (escaping can
    triple its size)."""
    step = max(limit // 6, 1)
    out: list[str] = []
    for line in markdown.splitlines(keepends=True):
        if utf16_len(escape(line)) * 2 <= limit:
            out.append(line)
        else:
            out.extend(line[i:i + step] for i in range(0, len(line), step))
    return out


def plain(markup: str) -> str:
    """A formatted message as plain text (the fallback when Telegram refuses the HTML)."""
    return html.unescape(_TAG.sub("", markup))
