// Small helpers shared by the pages (settings, memory, routines) and the chat.
export const $ = (sel) => document.querySelector(sel);

export function toast(message) {
  const item = document.createElement("div");
  item.className = "toast";
  item.setAttribute("role", "alert");
  item.textContent = message;
  $("#toast").append(item);
  setTimeout(() => item.remove(), 8000);
}

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
