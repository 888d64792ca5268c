// Small helpers shared by the settings and memory pages.
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
