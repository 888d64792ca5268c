// An answer's sources (the passages its knowledge_search returned, narrowed to those it names):
// chips under the answer, each a button that opens the passage in a dialog
// (GET /knowledge/passages/<id>) with its document's name, where it is, and a link to the
// document on the Knowledge page, the words the search matched marked in it. A passage is an
// uploaded document speaking, not the owner: its text and names are only ever set as text.
import { api } from "./api.js";
import { el, fileIcon } from "./cards.js";
import { marked } from "./knowledge-marks.js";

/** "models.txt › Field options › null (line 120)", "report.pdf, page 4": how a chip and the dialog name a source. */
function label(source) {
  if (!source.where) return source.name;
  const inSection = source.location && source.location.section && !source.location.page;
  return inSection ? `${source.name} › ${source.where}` : `${source.name}, ${source.where}`;
}

/** The chips under an answer (a labelled group of buttons); an empty fragment when none is well-formed. */
export function sourceChips(sources) {
  const box = el("div", "sources");
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", "Sources of this answer");
  box.append(el("span", "sources-label", "Sources"));
  // An imported chat's sources are whatever its file said: only well-formed ones become chips.
  for (const raw of sources) {
    if (!raw || typeof raw !== "object" || !raw.passage_id) continue;
    const source = {
      ...raw,
      name: String(raw.name || "document"),
      where: raw.where ? String(raw.where) : "",
      query: typeof raw.query === "string" ? raw.query : "",
      location: raw.location && typeof raw.location === "object" ? raw.location : {},
    };
    const chip = el("button", "chip source");
    chip.type = "button";
    chip.dataset.passageId = String(source.passage_id);
    chip.setAttribute("aria-haspopup", "dialog");
    chip.title = `Open the passage from ${label(source)}`;
    chip.append(fileIcon(), el("span", "name", source.name));
    if (source.where) chip.append(el("span", "where", source.where));
    chip.addEventListener("click", () => openPassage(source, chip));
    box.append(chip);
  }
  return box.querySelector("button") ? box : document.createDocumentFragment(); // nothing to show: nothing added
}

let dialog = null;

/** The one passage dialog of the page (made on first use): Esc or Close shuts it. */
function passageDialog() {
  if (dialog) return dialog;
  dialog = el("dialog", "passage-dialog");
  dialog.setAttribute("aria-labelledby", "passage-title");
  const head = el("div", "passage-head");
  const title = el("h2", "", "");
  title.id = "passage-title";
  const close = el("button", "close", "Close");
  close.type = "button";
  close.addEventListener("click", () => dialog.close());
  head.append(title, close);
  const where = el("p", "passage-where");
  const note = el("p", "hint passage-note", "From your uploaded document: Navi read it as data, not as your words.");
  const text = el("div", "passage-text");
  text.tabIndex = 0; // a long passage scrolls by keyboard
  text.setAttribute("role", "region");
  text.setAttribute("aria-label", "Passage text");
  const link = el("a", "passage-link", "Open the document at this passage");
  dialog.append(head, where, note, text, link);
  dialog.addEventListener("click", (e) => {
    if (e.target === dialog) dialog.close(); // a click on the backdrop
  });
  document.body.append(dialog);
  return dialog;
}

async function openPassage(source, opener) {
  const box = passageDialog();
  const [title, where, text, link] = ["#passage-title", ".passage-where", ".passage-text", ".passage-link"].map((s) => box.querySelector(s));
  title.textContent = source.name;
  where.textContent = source.where || "";
  where.hidden = !source.where;
  text.textContent = "Loading the passage…";
  text.classList.remove("gone");
  link.href = `/knowledge/${encodeURIComponent(source.document_id)}/view#passage-${encodeURIComponent(source.passage_id)}`;
  box.addEventListener("close", () => opener.isConnected && opener.focus(), { once: true });
  if (!box.open) box.showModal();
  box.querySelector(".close").focus();
  try {
    const passage = await api.passage(source.passage_id);
    title.textContent = passage.name;
    where.textContent = passage.where || "";
    where.hidden = !passage.where;
    // The words of the search that found it, marked (as text nodes and <mark>s: never HTML).
    text.replaceChildren(marked(String(passage.text), source.query));
    text.setAttribute("aria-label", source.query ? `Passage text, the words of “${source.query}” marked` : "Passage text");
  } catch (err) {
    text.textContent = `This passage cannot be shown: ${err.message}`;
    text.classList.add("gone");
  }
}
