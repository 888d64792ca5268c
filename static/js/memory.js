// The memory page: the facts Navi keeps about you (edit the value, forget) and the summary
// built from them (GET/POST /memory, PATCH/DELETE /memory/facts/<id>, POST …/confirm).
import { api } from "./api.js";
import { el } from "./cards.js";
import { $, toast, when } from "./pagekit.js";

function showSummary(summary, updated) {
  $("#summary").textContent = summary || "No summary yet.";
  if (updated !== undefined) $("#summary-date").textContent = updated ? `Updated ${when(updated)}` : "";
}

function factItem(fact) {
  const li = el("li", "fact");
  li.dataset.id = fact.id;
  const label = el("label", "fact-key");
  const inputId = `fact-${fact.id}`;
  label.htmlFor = inputId;
  label.append(el("span", "category", fact.category), document.createTextNode(` ${fact.key}`));
  const input = el("input", "fact-value");
  input.id = inputId;
  input.value = fact.value;
  const save = el("button", "save", "Save");
  save.type = "button";
  save.setAttribute("aria-label", `Save ${fact.key}`);
  const forget = el("button", "danger-outline forget", "Forget");
  forget.type = "button";
  forget.setAttribute("aria-label", `Forget ${fact.key}`);
  save.addEventListener("click", async () => {
    try {
      const result = await api.saveFact(fact.id, input.value.trim());
      fact.value = result.fact.value;
      showSummary(result.summary, result.summary_updated_at);
      save.textContent = "Saved";
      setTimeout(() => (save.textContent = "Save"), 1500);
    } catch (err) {
      toast(`Could not save: ${err.message}`);
    }
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") save.click();
  });
  forget.addEventListener("click", async () => {
    if (!window.confirm(`Forget "${fact.key}"?`)) return;
    try {
      const result = await api.forgetFact(fact.id);
      li.remove();
      showSummary(result.summary, result.summary_updated_at);
      $("#facts-empty").hidden = !!$("#facts").children.length;
    } catch (err) {
      toast(`Could not forget: ${err.message}`);
    }
  });
  const row = el("div", "fact-row");
  row.append(input, save, forget);
  li.append(label, row);
  if (fact.untrusted) li.append(unverifiedNote(fact, li));
  return li;
}

// Saved while the chat held outside content: Navi treats it as unverified until you confirm it.
function unverifiedNote(fact, li) {
  const note = el("p", "untrusted-note", `⚠ Unverified: saved after Navi read ${fact.untrusted_source}. `);
  const confirm = el("button", "", "Confirm");
  confirm.type = "button";
  confirm.setAttribute("aria-label", `Confirm ${fact.key} as true`);
  confirm.addEventListener("click", async () => {
    try {
      const result = await api.confirmFact(fact.id);
      note.remove();
      li.classList.remove("unverified");
      showSummary(result.summary, result.summary_updated_at);
    } catch (err) {
      toast(`Could not confirm: ${err.message}`);
    }
  });
  note.append(confirm);
  li.classList.add("unverified");
  return note;
}

function setUpAddForm() {
  const form = $("#add-fact");
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const [category, key, value] = ["category", "key", "value"].map((n) => form.elements[n].value.trim());
    try {
      const result = await api.addFact(category, key, value);
      const item = factItem(result.fact);
      $("#facts").append(item);
      $("#facts-empty").hidden = true;
      showSummary(result.summary, result.summary_updated_at);
      form.reset();
      form.elements.category.focus();
    } catch (err) {
      toast(`Could not add: ${err.message}`);
    }
  });
}

async function start() {
  setUpAddForm();
  try {
    const memory = await api.memory();
    showSummary(memory.summary, memory.summary_updated_at);
    $("#facts").replaceChildren(...memory.facts.map(factItem));
    $("#facts-empty").hidden = memory.facts.length > 0;
    document.body.dataset.ready = "1";
  } catch (err) {
    toast(`Could not load your memory: ${err.message}`);
  }
}

start();
