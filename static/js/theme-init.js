// Runs before the page paints (a classic script in <head>): the theme chosen in Settings,
// mirrored in localStorage, goes onto <html data-theme> so no page flashes the other theme.
(function () {
  var theme = "system";
  try {
    theme = localStorage.getItem("navi-theme") || "system";
  } catch (e) {
    /* storage blocked: follow the system */
  }
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
  // Code highlighting styles come in a light and a dark sheet chosen by media query.
  var links = document.querySelectorAll("link[data-scheme]");
  for (var i = 0; i < links.length; i++) {
    var scheme = links[i].getAttribute("data-scheme");
    links[i].media = theme === "system" ? "(prefers-color-scheme: " + scheme + ")" : theme === scheme ? "all" : "not all";
  }
})();
