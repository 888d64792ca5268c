// Small helpers shared by the pages (settings, memory, routines) and the chat.
export const $ = (sel) => document.querySelector(sel);

/** A toast: "error" (red, announced at once, until the next successful change or 8 s) or
 * "info" (quiet colours, 4 s). */
export function toast(message, kind = "error") {
  const item = document.createElement("div");
  item.className = `toast ${kind}`;
  item.setAttribute("role", kind === "error" ? "alert" : "status");
  item.textContent = message;
  $("#toast").append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

document.addEventListener("navi:saved", () => {
  for (const item of document.querySelectorAll("#toast .toast.error")) item.remove();
});

export function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "never";
}

/** Put text on the clipboard (the async API where allowed, a hidden textarea otherwise). */
export function copyText(text) {
  return new Promise((resolve) => {
    const fallback = () => fallbackCopy(text, resolve);
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(resolve, fallback);
    else fallback();
  });
}

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
