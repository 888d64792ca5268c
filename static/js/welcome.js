// The welcome of an empty chat: what Navi can do, as example requests one click sends.
import { el } from "./cards.js";

export const EXAMPLES = [
  { what: "Files", text: "List the files in my workspace and tell me what the biggest one is about." },
  { what: "Web", text: "Search the web for today's top technology news and give me three headlines with links." },
  { what: "Routines", text: "Every weekday at 8, tell me the weather in Berlin." },
  { what: "Memory", text: "Remember that I prefer short answers with bullet points." },
  { what: "Documents", text: "What do my documents say about the warranty of my dishwasher? Cite the passages.",
    link: { href: "/knowledge/", text: "Add your documents in Knowledge first" } },
];

/** The welcome box; `onPick(text)` sends the example. */
export function welcome(onPick) {
  const box = el("section", "welcome");
  box.id = "welcome";
  box.setAttribute("aria-labelledby", "welcome-title");
  const title = el("h2", "", "What can Navi do for you?");
  title.id = "welcome-title";
  const intro = el("p", "hint", "Navi answers, and acts: it works with your files, searches the web, runs routines on a schedule, "
    + "remembers what matters to you and reads your documents. Try one of these, or type your own below.");
  const list = el("ul", "examples");
  for (const example of EXAMPLES) {
    const button = el("button", "example");
    button.type = "button";
    button.append(el("span", "example-kind", example.what), el("span", "example-text", example.text));
    button.addEventListener("click", () => onPick(example.text));
    const item = el("li");
    item.append(button);
    if (example.link) {
      const link = el("a", "example-link", example.link.text);
      link.href = example.link.href;
      item.append(link);
    }
    list.append(item);
  }
  box.append(title, intro, list);
  return box;
}
