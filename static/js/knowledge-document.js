// A document opened from a source chip or a search result (/knowledge/<id>/view#passage-<id>):
// the passage named in the address is scrolled to, marked and said; the rest is server-rendered.
import { $ } from "./pagekit.js";

function markCited() {
  for (const old of document.querySelectorAll(".doc-passage.cited")) {
    old.classList.remove("cited");
    old.removeAttribute("aria-current");
  }
  const target = location.hash.startsWith("#passage-") && document.getElementById(location.hash.slice(1));
  const note = $("#cited-note");
  if (!target) {
    note.hidden = true;
    return;
  }
  target.classList.add("cited");
  target.setAttribute("aria-current", "true");
  target.scrollIntoView({ block: "center" });
  target.focus({ preventScroll: true });
  note.textContent = `The passage you opened is marked (passage ${target.querySelector(".doc-where").textContent.split(" ·")[0]}).`;
  note.hidden = false;
}

window.addEventListener("hashchange", markCited);
markCited();
document.body.dataset.ready = "1";
