// Settings → Hosts on your network: the owner allows hosts on the LAN that Navi may reach
// (GET/POST /settings/allowed-hosts, DELETE /settings/allowed-hosts/<entry>); others see the list.
import { csrfToken, saved } from "./api.js";
import { el } from "./cards.js";
import { $, toast } from "./pagekit.js";

async function call(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json", "X-CSRFToken": csrfToken() } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `${method} ${path} failed with HTTP ${response.status}`);
  if (method !== "GET") saved();
  return data;
}

function row(entry, { who = "", removable = false, ignored = "" } = {}) {
  const li = el("li", "host");
  li.append(el("span", "mono", entry), el("span", "hint", who));
  // Stored before link-local and unspecified addresses were refused: listed, to be removed, but opens nothing.
  if (ignored) li.append(el("span", "hint", ignored));
  if (removable) {
    const remove = el("button", "danger-outline", "Remove");
    remove.type = "button";
    remove.setAttribute("aria-label", `Remove ${entry}`);
    remove.addEventListener("click", async () => {
      try {
        await call("DELETE", `/settings/allowed-hosts/${encodeURIComponent(entry)}`);
        $("#host-warning").hidden = true;
        await load();
        $("#host-entry").focus();
      } catch (err) {
        toast(`Could not remove ${entry}: ${err.message}`);
      }
    });
    li.append(remove);
  }
  return li;
}

async function load() {
  const data = await call("GET", "/settings/allowed-hosts");
  $("#host-add").hidden = !data.can_edit;
  $("#hosts-readonly").hidden = data.can_edit;
  const items = data.hosts.map((h) =>
    row(h.entry, { who: h.added_by ? `allowed by ${h.added_by}` : "", removable: data.can_edit, ignored: h.ignored || "" }),
  );
  for (const entry of data.from_environment) items.push(row(entry, { who: "from HTTP_ALLOWED_HOSTS (the server's environment)" }));
  $("#hosts").replaceChildren(...items);
  $("#hosts-empty").hidden = items.length > 0;
}

async function start() {
  $("#host-add").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const added = await call("POST", "/settings/allowed-hosts", { host: $("#host-entry").value.trim() });
      $("#host-entry").value = "";
      $("#host-warning").textContent = `Allowed ${added.entry}. ${added.warning}`;
      $("#host-warning").hidden = false;
      await load();
    } catch (err) {
      toast(`Could not allow that host: ${err.message}`);
    }
  });
  try {
    await load();
  } catch (err) {
    toast(`Could not load the allowed hosts: ${err.message}`);
  }
}

start();
