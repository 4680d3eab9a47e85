// Behaviour every portal page may use, declared in the markup with data attributes. The portal's
// Content-Security-Policy allows no inline script, handler (onclick=…) or style attribute, so
// none of this may live in the templates.
// - <select data-autosubmit>: submits its form when changed (a <noscript> button does without).
// - <form data-confirm="question">: asks before submitting (deletions).
// - <div class="meter" data-percent="40"><span></span></div>: the bar's width (CSSOM, allowed).
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
})();
