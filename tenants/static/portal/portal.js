// Behaviour every portal page may use, declared in the markup with data attributes. The portal's
// Content-Security-Policy allows no inline script, handler (onclick=…) or style attribute, so
// none of this may live in the templates.
// - <select data-autosubmit>: submits its form when changed (a <noscript> button does without).
// - <form data-confirm="question">: asks before submitting (deletions).
// - <div class="meter" data-percent="40"><span></span></div>: the bar's width (CSSOM, allowed).
// - <time datetime="…Z">: the portal shows times in UTC (tenants/time_display.py); the title
//   gives the reader's local time on hover. `window.portalTime` makes the same for live.js.
(function () {
  "use strict";
  document.querySelectorAll("select[data-autosubmit]").forEach((select) => {
    select.addEventListener("change", () => select.form.submit());
  });
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
  document.querySelectorAll(".meter[data-percent] > span").forEach((bar) => {
    const percent = Math.max(0, Math.min(100, Number(bar.parentElement.dataset.percent) || 0));
    bar.style.width = percent + "%";
  });

  const pad = (n, width) => String(n).padStart(width || 2, "0");
  function utcText(date, milliseconds) {
    const day = date.getUTCFullYear() + "-" + pad(date.getUTCMonth() + 1) + "-" + pad(date.getUTCDate());
    const time = pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes()) + ":" + pad(date.getUTCSeconds());
    return day + " " + time + (milliseconds ? "." + pad(date.getUTCMilliseconds(), 3) : "") + " UTC";
  }
  const localTitle = (date) => "Your time: " + date.toLocaleString([], { timeZoneName: "short" });
  function timeElement(date, milliseconds) {
    const element = document.createElement("time");
    element.dateTime = date.toISOString();
    element.textContent = utcText(date, milliseconds);
    element.title = localTitle(date);
    return element;
  }
  window.portalTime = { text: utcText, element: timeElement, title: localTitle };
  document.querySelectorAll("time[datetime*='T']").forEach((element) => {
    const date = new Date(element.dateTime);
    if (!Number.isNaN(date.getTime())) element.title = localTitle(date);
  });
})();
