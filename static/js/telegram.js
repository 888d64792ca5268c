// The settings page's "Connect Telegram" section: the link state, a one-time code with its deep
// link (valid 10 minutes), unlinking, and the channel's problems (a revoked token, Telegram
// unreachable) as the server reports them.
import { api } from "./api.js";
import { el } from "./cards.js";
import { $, toast, when } from "./pagekit.js";

function showState(state) {
  const error = $("#telegram-error");
  error.hidden = !state.error;
  error.textContent = state.error || "";
  $("#telegram-link").hidden = !state.configured;
  $("#telegram-unlink").hidden = !state.linked;
  if (!state.configured) {
    $("#telegram-state").textContent =
      "Telegram is not set up on this server: the admin sets TELEGRAM_BOT_TOKEN (from @BotFather) and restarts Navi.";
  } else if (state.linked) {
    $("#telegram-state").textContent = `Linked to Telegram account @${state.username}.`;
    $("#telegram-link").textContent = "Link another account instead";
  } else {
    $("#telegram-state").textContent = "Not linked yet.";
    $("#telegram-link").textContent = "Show a link code";
  }
}

function showCode(created) {
  const box = $("#telegram-code");
  const link = el("a", "", created.link);
  link.href = created.link;
  link.target = "_blank";
  link.rel = "noopener";
  box.replaceChildren(
    el("span", "", "Open "), link, el("span", "", " on the phone, or send the bot "),
    el("code", "secret", `/start ${created.code}`), el("span", "", ` — valid until ${when(created.expires_at)}, once.`),
  );
  box.hidden = false;
}

async function refresh() {
  showState(await api.telegram());
}

export async function startTelegram() {
  $("#telegram-link").addEventListener("click", async () => {
    try {
      showCode(await api.linkTelegram());
    } catch (err) {
      toast(`Could not make a link code: ${err.message}`);
      await refresh().catch(() => {});
    }
  });
  $("#telegram-unlink").addEventListener("click", async () => {
    if (!window.confirm("Unlink Telegram? The account can no longer talk to Navi.")) return;
    try {
      await api.unlinkTelegram();
      $("#telegram-code").hidden = true;
      await refresh();
    } catch (err) {
      toast(`Could not unlink: ${err.message}`);
    }
  });
  await refresh();
}
