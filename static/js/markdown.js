// Model output → safe DOM. Markdown is parsed by marked, the resulting HTML is sanitised by
// DOMPurify (after parsing, so nothing the parser produces escapes), then code blocks are
// highlighted and get a header (language, copy button) and math placeholders are typeset by
// KaTeX (from the sanitised data-tex text, so KaTeX's own markup never passes the sanitiser). Images are only kept when they point at this server or
// are data: URIs; anything else becomes a plain link-free note, so the page never loads it.
import { Marked } from "/static/vendor/marked.esm.js";
import DOMPurify from "/static/vendor/purify.es.mjs";
import hljs from "/static/vendor/highlight.min.js";
import katex from "/static/vendor/katex/katex.mjs";
import { copyText } from "./pagekit.js";

function escapeAttr(text) {
  return text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function mathToken(type, display) {
  return (raw, tex) => ({ type, raw, text: tex.trim(), display });
}

// $$…$$ (display) and $…$ (inline; no space inside the dollars and no digit after the closing
// one, so "costs $5 and $6" stays text).
const MATH = {
  extensions: [
    {
      name: "mathBlock",
      level: "block",
      start: (src) => src.match(/\$\$/)?.index,
      tokenizer(src) {
        const m = /^\$\$([\s\S]+?)\$\$[^\S\n]*(?:\n|$)/.exec(src);
        return m ? mathToken("mathBlock", true)(m[0], m[1]) : undefined;
      },
      renderer: (t) => `<div class="math" data-display="1" data-tex="${escapeAttr(t.text)}"></div>\n`,
    },
    {
      name: "mathInline",
      level: "inline",
      start: (src) => src.match(/\$/)?.index,
      tokenizer(src) {
        const m = /^\$\$([^$]+?)\$\$/.exec(src) || /^\$(?![\s$])((?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d)/.exec(src);
        return m ? mathToken("mathInline", m[0].startsWith("$$"))(m[0], m[1]) : undefined;
      },
      renderer: (t) => `<span class="math"${t.display ? ' data-display="1"' : ""} data-tex="${escapeAttr(t.text)}"></span>`,
    },
  ],
  renderer: {
    // DOMPurify drops <input>: task list boxes are drawn as spans, ticked ones visibly different.
    checkbox: ({ checked }) => checked
      ? '<span class="task-box checked" role="img" aria-label="done">✓</span> '
      : '<span class="task-box" role="img" aria-label="not done"></span> ',
  },
};

const marked = new Marked({ gfm: true, breaks: true, async: false }, MATH);

function safeImageSrc(src) {
  if (!src) return false;
  if (/^data:image\/(png|jpe?g|gif|webp);base64,/i.test(src)) return true;
  // Same-origin session files only (published by the agent); a bare "x" would hit our server.
  return /^\/sessions\/[0-9a-f-]{36}\/files\/[^?#]+$/i.test(src);
}

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") || "";
    if (!/^(https?:|mailto:|#|\/)/i.test(href)) node.removeAttribute("href");
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
  if (node.tagName === "IMG" && !safeImageSrc(node.getAttribute("src"))) {
    node.setAttribute("data-blocked-src", node.getAttribute("src") || "");
    node.removeAttribute("src");
    node.removeAttribute("srcset");
  }
});

const PURIFY = {
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "video", "audio", "source", "picture"],
  FORBID_ATTR: ["style", "srcset", "background", "poster"],
  RETURN_DOM_FRAGMENT: true,
};

/** Replace images whose source was blocked with a visible text note. */
function defuseImages(fragment) {
  for (const img of fragment.querySelectorAll("img[data-blocked-src]")) {
    const note = document.createElement("span");
    note.className = "blocked-image";
    const alt = img.getAttribute("alt") || "image";
    note.textContent = `[${alt}: image not loaded (only this server's files are shown) — ${img.getAttribute("data-blocked-src")}]`;
    img.replaceWith(note);
  }
}

function decorateCode(fragment) {
  for (const code of fragment.querySelectorAll("pre > code")) {
    try {
      hljs.highlightElement(code);
    } catch {
      /* an unknown language stays plain text */
    }
    const pre = code.parentElement;
    pre.classList.add("code");
    // The header sits outside the <pre> (which scrolls sideways) so it can stick to the top
    // of the conversation while a long block scrolls by.
    const block = document.createElement("div");
    block.className = "codeblock";
    const head = document.createElement("div");
    head.className = "code-head";
    const lang = document.createElement("span");
    lang.className = "lang";
    lang.textContent = (/(?:^|\s)language-(\S+)/.exec(code.className) || [])[1] || "text";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.title = "Copy this code";
    head.append(lang, button);
    pre.replaceWith(block);
    block.append(head, pre);
  }
}

function typesetMath(fragment) {
  for (const node of fragment.querySelectorAll(".math[data-tex]")) {
    try {
      katex.render(node.dataset.tex, node, { displayMode: node.dataset.display === "1", throwOnError: false, output: "htmlAndMathml" });
    } catch {
      node.textContent = node.dataset.tex;
    }
  }
}

/** Render Markdown text into `target` (replacing its content). */
export function renderMarkdown(target, text, { highlight = true } = {}) {
  const html = marked.parse(text || "");
  const fragment = DOMPurify.sanitize(html, PURIFY);
  defuseImages(fragment);
  if (highlight) decorateCode(fragment);
  typesetMath(fragment);
  target.replaceChildren(fragment);
}

// One delegated listener serves every copy button on the page.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  const code = button.closest(".codeblock")?.querySelector("pre code");
  copyText(code ? code.textContent : "").then(() => {
    button.textContent = "Copied";
    setTimeout(() => (button.textContent = "Copy"), 1200);
  });
});

export { copyText }; // the chat imports it from here
