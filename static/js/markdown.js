// Model output → safe DOM. Markdown is parsed by marked, the resulting HTML is sanitised by
// DOMPurify (after parsing, so nothing the parser produces escapes), then code blocks are
// highlighted and get a copy button. Images are only kept when they point at this server or
// are data: URIs; anything else becomes a plain link-free note, so the page never loads it.
import { Marked } from "/static/vendor/marked.esm.js";
import DOMPurify from "/static/vendor/purify.es.mjs";
import hljs from "/static/vendor/highlight.min.js";

const marked = new Marked({ gfm: true, breaks: true, async: false });

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
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.title = "Copy this code";
    pre.classList.add("code");
    pre.prepend(button);
  }
}

/** Render Markdown text into `target` (replacing its content). */
export function renderMarkdown(target, text, { highlight = true } = {}) {
  const html = marked.parse(text || "");
  const fragment = DOMPurify.sanitize(html, PURIFY);
  defuseImages(fragment);
  if (highlight) decorateCode(fragment);
  target.replaceChildren(fragment);
}

// One delegated listener serves every copy button on the page.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  const code = button.parentElement.querySelector("code");
  const text = code ? code.textContent : "";
  const done = () => {
    button.textContent = "Copied";
    setTimeout(() => (button.textContent = "Copy"), 1200);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text, done));
  } else {
    fallbackCopy(text, done);
  }
});

function fallbackCopy(text, done) {
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.append(area);
  area.select();
  try {
    document.execCommand("copy");
    done();
  } finally {
    area.remove();
  }
}
