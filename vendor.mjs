// Copies the browser (ES module) builds of the chat page's libraries from node_modules into
// static/vendor/, which Django serves. Run by `npm ci` (postinstall); static/vendor/ is gitignored.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";

const FILES = {
  "node_modules/marked/lib/marked.esm.js": "marked.esm.js",
  "node_modules/dompurify/dist/purify.es.mjs": "purify.es.mjs",
  "node_modules/@highlightjs/cdn-assets/es/highlight.min.js": "highlight.min.js",
  "node_modules/@highlightjs/cdn-assets/styles/github.min.css": "hljs-light.css",
  "node_modules/@highlightjs/cdn-assets/styles/github-dark.min.css": "hljs-dark.css",
};

mkdirSync("static/vendor", { recursive: true });
for (const [src, name] of Object.entries(FILES)) {
  // Source-map comments point at files we do not ship; drop them so the browser asks for nothing.
  const text = readFileSync(src, "utf8").replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n");
  writeFileSync(`static/vendor/${name}`, text);
}
console.log(`vendor.mjs: ${Object.keys(FILES).length} files copied to static/vendor/`);
