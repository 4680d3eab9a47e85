// "Get started" (/start/): the snippet tabs, their Copy buttons, and the pasted secret filled
// into every snippet (it stays in this page). The placeholder the snippets carry instead of the
// secret is the tab list's data-placeholder.
(function () {
  "use strict";
  const tabs = document.querySelector(".tabs[data-placeholder]");
  if (!tabs) return;
  const placeholder = tabs.dataset.placeholder;
  const originals = {};
  document.querySelectorAll("pre[id^=snippet-]").forEach((pre) => {
    originals[pre.id] = pre.textContent;
  });
  const input = document.getElementById("secret-input");
  if (input) {
    input.addEventListener("input", () => {
      Object.entries(originals).forEach(([id, text]) => {
        document.getElementById(id).textContent = input.value
          ? text.split(placeholder).join(input.value)
          : text;
      });
    });
  }
  document.querySelectorAll("[data-tab]").forEach((tab) => {
    tab.addEventListener("click", () => {
      document.querySelectorAll("[data-tab]").forEach((t) => {
        t.setAttribute("aria-selected", String(t === tab));
      });
      document.querySelectorAll("[data-snippet]").forEach((s) => {
        s.hidden = s.dataset.snippet !== tab.dataset.tab;
      });
    });
  });
  document.querySelectorAll("[data-copy]").forEach((button) => {
    button.addEventListener("click", async () => {
      const text = document.getElementById("snippet-" + button.dataset.copy).textContent;
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
      } catch (exc) {
        button.textContent = "Select and copy";
      }
      setTimeout(() => {
        button.textContent = "Copy";
      }, 1500);
    });
  });
})();
