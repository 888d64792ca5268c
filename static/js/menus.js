// Drop-down menus made of <details class="menu">: they close on Esc (focus back on their
// summary), on a click outside them, and once one of their items was chosen (a download too).

export function closeMenusOn(root = document) {
  const open = () => [...root.querySelectorAll("details.menu[open]")];
  document.addEventListener(
    "keydown",
    (e) => {
      if (e.key !== "Escape") return;
      const menus = open();
      if (!menus.length) return;
      e.preventDefault(); // Esc closed a menu: it must not also stop the run
      for (const menu of menus) menu.open = false;
      menus[0].querySelector("summary").focus();
    },
    true,
  );
  document.addEventListener("click", (e) => {
    for (const menu of open()) {
      if (!menu.contains(e.target)) menu.open = false;
      else if (e.target.closest(".menu-items a, .menu-items button")) setTimeout(() => (menu.open = false));
    }
  });
}
