// Copies the browser (ES module) builds of the pages' libraries from node_modules into
// static/vendor/, which Django serves. Run by `npm ci` (postinstall); static/vendor/ is gitignored.
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";

const FILES = {
  "node_modules/marked/lib/marked.esm.js": "marked.esm.js",
  "node_modules/dompurify/dist/purify.es.mjs": "purify.es.mjs",
  "node_modules/@highlightjs/cdn-assets/es/highlight.min.js": "highlight.min.js",
  "node_modules/@highlightjs/cdn-assets/styles/github.min.css": "hljs-light.css",
  "node_modules/@highlightjs/cdn-assets/styles/github-dark.min.css": "hljs-dark.css",
  "node_modules/katex/dist/katex.mjs": "katex/katex.mjs",
  "node_modules/katex/dist/katex.min.css": "katex/katex.min.css",
  // Accessibility checks of the browser tests (injected by the test, never by a page).
  "node_modules/axe-core/axe.min.js": "axe.min.js",
};
// Binary folders copied as they are (KaTeX's CSS loads its fonts from fonts/ next to it).
const DIRS = { "node_modules/katex/dist/fonts": "katex/fonts" };

mkdirSync("static/vendor/katex", { recursive: true });
for (const [src, name] of Object.entries(FILES)) {
  // Source-map comments point at files we do not ship; drop them so the browser asks for nothing.
  const text = readFileSync(src, "utf8").replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n");
  writeFileSync(`static/vendor/${name}`, text);
}
for (const [src, name] of Object.entries(DIRS)) cpSync(src, `static/vendor/${name}`, { recursive: true });
console.log(`vendor.mjs: ${Object.keys(FILES).length} files and ${Object.keys(DIRS).length} folder copied to static/vendor/`);
