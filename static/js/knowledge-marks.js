// The Knowledge page's links into a document (/knowledge/<id>/view) and a search result's
// matching words marked, with its score (issue #53); kept apart from knowledge.js (the upload
// and status list).
import { el } from "./cards.js";

/** A document's name, opening its view. */
export function documentLink(doc) {
  const link = el("a", "document-name", doc.name);
  link.href = `/knowledge/${encodeURIComponent(doc.id)}/view`;
  return link;
}

/** The words of a query worth marking (three letters or more, without duplicates). */
function words(query) {
  return [...new Set(query.toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) || [])];
}

/** `text` as nodes with every query word marked (<mark>, inserted as text: never HTML). */
export function marked(text, query) {
  const found = words(query);
  const node = el("p", "passage");
  if (!found.length) {
    node.textContent = text;
    return node;
  }
  const escaped = found.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const pattern = new RegExp(`(${escaped.join("|")})[\\p{L}\\p{N}]*`, "giu");
  let at = 0;
  for (const match of text.matchAll(pattern)) {
    node.append(document.createTextNode(text.slice(at, match.index)), el("mark", "", match[0]));
    at = match.index + match[0].length;
  }
  node.append(document.createTextNode(text.slice(at)));
  return node;
}

/** A search result: its document (opening the passage), where, the score, the marked passage. */
export function resultParts(result, query, where) {
  const link = el("a", "", result.name);
  link.href = `/knowledge/${encodeURIComponent(result.document_id)}/view#passage-${result.passage_id}`;
  const score = el("span", "hint score", ` · score ${Number(result.score).toFixed(3)}`);
  return [link, el("span", "hint", where ? ` — ${where}` : ""), score, marked(result.text, query)];
}
