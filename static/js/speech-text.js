// An answer's Markdown as words to say, and an answer being streamed cut into sentences as soon
// as each is complete. The same rules as voice_app/speakable.py (Telegram's voice replies): code
// blocks, math, images and HTML are left out, a link is read as its text, headings and list
// items become sentences of their own.

const FENCE = /^ {0,3}(`{3,}|~{3,})[^\n]*\n[\s\S]*?(?:^ {0,3}\1[ \t]*$|(?![\s\S]))/gm;
const DISPLAY_MATH = /\$\$[\s\S]*?\$\$/g;
const INLINE_MATH = /(?<![\\$\w])\$(?=\S)[^$\n]+?(?<=\S)\$(?![\w$])/g;
const IMAGE = /!\[[^\]]*\]\([^)]*\)/g;
const LINK = /\[([^\]]+)\]\((?:[^()]|\([^)]*\))*\)|\[([^\]]+)\]\[[^\]]*\]/g;
const AUTOLINK = /<(https?:\/\/[^>\s]+)>/g;
const BARE_URL = /\bhttps?:\/\/[^\s<>)\]]+/g;
const HTML = /<\/?[A-Za-z][^>\n]*>/g;
const INLINE_CODE = /(`+)(.+?)\1/g;
const STRONG = /(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1/g;
const EMPHASIS = /(?<![\w*])([*_])(?=\S)(.+?)(?<=\S)\1(?![\w*])/g;
const HEADING = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/;
const ITEM = /^\s*(?:[-*+]|\d{1,9}[.)])\s+(?:\[[ xX]\]\s+)?/;
const QUOTE = /^\s*(?:>\s?)+/;
const RULE = /^\s*(?:[-*_]\s*){3,}$/;
const TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$/;
const SENTENCE_END = /(?<=[.!?…])["'”’)\]]*\s+/;
const TERMINAL = ".!?…:;";

function host(url) {
  try {
    return new URL(url).hostname || "a link";
  } catch {
    return "a link";
  }
}

function line(text) {
  let out = text.replace(IMAGE, "");
  out = out.replace(LINK, (_, a, b) => a || b);
  out = out.replace(AUTOLINK, (_, url) => host(url));
  out = out.replace(BARE_URL, (url) => host(url));
  out = out.replace(INLINE_CODE, (_, ticks, code) => code.trim());
  out = out.replace(HTML, "");
  for (let i = 0; i < 2; i += 1) out = out.replace(STRONG, "$2").replace(EMPHASIS, "$2");
  return out.replaceAll("\\", "").trim();
}

function closed(text) {
  return !text || TERMINAL.includes(text.at(-1)) ? text : `${text}.`;
}

/** The words of an answer, in paragraphs ("\n\n" between them). */
export function speakable(markdown) {
  let text = markdown.replaceAll("\r\n", "\n").replace(FENCE, "\n");
  text = text.replace(DISPLAY_MATH, " ").replace(INLINE_MATH, " ");
  const paragraphs = [];
  let current = [];
  const flush = () => {
    if (current.length) paragraphs.push(current.join(" "));
    current = [];
  };
  for (let raw of text.split("\n")) {
    if (!raw.trim() || RULE.test(raw) || TABLE_RULE.test(raw)) {
      flush();
      continue;
    }
    raw = raw.replace(QUOTE, "");
    const heading = raw.match(HEADING);
    if (heading) {
      flush();
      paragraphs.push(closed(line(heading[1])));
      continue;
    }
    if (raw.includes("|") && raw.trim().startsWith("|")) {
      const cells = raw.trim().replace(/^\|+|\|+$/g, "").split("|").map(line);
      flush();
      paragraphs.push(closed(cells.filter(Boolean).join(", ")));
      continue;
    }
    const item = raw.match(ITEM);
    if (item) {
      flush();
      current.push(closed(line(raw.slice(item[0].length))));
      flush();
      continue;
    }
    current.push(line(raw));
  }
  flush();
  return paragraphs.map((p) => p.split(/\s+/).filter(Boolean).join(" ")).filter((p) => p.replace(/[ .,]/g, "")).join("\n\n");
}

/** Speakable text cut into sentences, in order. */
export function sentences(text) {
  const out = [];
  for (const paragraph of text.split("\n\n")) {
    for (const s of paragraph.split(SENTENCE_END)) if (s.trim()) out.push(s.trim());
  }
  return out;
}

const FENCE_LINE = /^ {0,3}(`{3,}|~{3,})/;

/** An answer as it streams: `push(delta)` returns the sentences completed by it (outside code
 * blocks), `flush()` the rest at the end. */
export class SentenceStream {
  constructor() {
    this.source = "";
    this.done = 0; // where the next sentence starts (never inside a code block)
  }

  push(delta) {
    this.source += delta;
    return this.take(false);
  }

  flush() {
    return this.take(true);
  }

  take(final) {
    const pending = this.source.slice(this.done);
    const end = final ? pending.length : this.boundary(pending);
    if (end <= 0) return [];
    this.done += end;
    return sentences(speakable(pending.slice(0, end)));
  }

  /** The last place in `pending` where a sentence or a line ends outside a code block. */
  boundary(pending) {
    let best = 0;
    let fence = null;
    let at = 0;
    for (const row of pending.split("\n")) {
      const isLast = at + row.length >= pending.length;
      const opener = row.match(FENCE_LINE);
      if (fence) {
        if (opener && opener[1][0] === fence[0] && opener[1].length >= fence.length && !row.trim().slice(opener[1].length)) {
          fence = null;
          if (!isLast) best = at + row.length + 1;
        }
      } else if (opener) {
        fence = opener[1];
      } else {
        const ends = [...row.matchAll(/[.!?…]["'”’)\]]*\s+/g)].map((m) => at + m.index + m[0].length);
        if (ends.length) best = Math.max(best, ends.at(-1));
        if (!isLast) best = at + row.length + 1; // a finished line: a heading, an item, a paragraph's end
      }
      at += row.length + 1;
    }
    return best;
  }
}
