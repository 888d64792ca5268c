// The theme (system / light / dark) on <html data-theme>, mirrored in localStorage for
// theme-init.js, which applies it early on every page.

/** Apply a theme now and remember it for the next page load. */
export function applyTheme(theme) {
  const value = theme === "light" || theme === "dark" ? theme : "system";
  try {
    localStorage.setItem("navi-theme", value);
  } catch {
    /* storage blocked: this page still switches */
  }
  if (value === "system") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = value;
  for (const link of document.querySelectorAll("link[data-scheme]")) {
    const scheme = link.dataset.scheme;
    link.media = value === "system" ? `(prefers-color-scheme: ${scheme})` : value === scheme ? "all" : "not all";
  }
}
