// "Run over history" on a rule's page, plain JS (no build step), through the REST API with this
// session and its CSRF token:
// - Preview: POST /api/v1/rules/{name}/runs {from, to} -> the counts and first outputs.
// - Run (after a preview of the same range): POST … {mode: "run", actions[, action]} -> 202
//   {id, state} (`action`: only that action of the rule, from 1, when one is chosen);
//   then GET …/runs/{id} every second, a progress bar and the figures, until it ends.
// - Cancel: POST …/runs/{id}/cancel.
// Times are typed in ISO 8601 (UTC unless an offset is given) and sent as such. Everything the API echoes is set with textContent.
(function () {
  "use strict";
  const card = document.getElementById("history");
  if (!card) return;
  const POLL_MS = 1000;
  const csrfInput = document.querySelector("input[name=csrfmiddlewaretoken]");
  const csrf = csrfInput ? csrfInput.value : "";
  const $ = (id) => document.getElementById(id);
  const from = $("history-from");
  const to = $("history-to");
  const actions = $("history-actions");
  const onlyAction = $("history-action"); // absent when the rule has one action or none
  const previewButton = $("history-preview");
  const runButton = $("history-run");
  const cancelButton = $("history-cancel");
  const state = $("history-state");
  const error = $("history-error");
  let previewed = null; // the range the last preview covered
  let following = null; // the run id being followed

  // ISO 8601 as the portal shows it ("2026-11-27 14:02:03", UTC) or as the API takes it
  // ("2026-11-27T14:02:03Z", an offset): a time without a zone is UTC, never the browser's.
  const ISO = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})(:\d{2}(?:\.\d{1,6})?)?\s*(Z|UTC|[+-]\d{2}:?\d{2})?$/i;

  function utc(input, name) {
    const value = input.value.trim();
    if (!value) return null;
    const m = ISO.exec(value);
    if (!m) {
      throw new Error(
        name + ": " + JSON.stringify(value) + " is not an ISO 8601 time: write it as " +
          "2026-11-27 14:00:00 (UTC) or 2026-11-27T14:00:00Z."
      );
    }
    let zone = (m[4] || "Z").toUpperCase();
    if (zone === "UTC") zone = "Z";
    else if (zone !== "Z" && zone.indexOf(":") < 0) zone = zone.slice(0, 3) + ":" + zone.slice(3);
    return m[1] + "T" + m[2] + (m[3] || ":00") + zone;
  }

  // Throws an Error in words when a field is not an ISO 8601 time.
  function range() {
    return { from: utc(from, "From"), to: utc(to, "To") };
  }

  function showError(message) {
    error.textContent = message;
    error.hidden = !message;
  }

  async function call(url, body) {
    const options = {
      credentials: "same-origin",
      headers: { "X-Tenant": card.dataset.tenant, Accept: "application/json" },
    };
    if (body !== undefined) {
      options.method = "POST";
      options.headers["Content-Type"] = "application/json";
      options.headers["X-CSRFToken"] = csrf;
      options.body = JSON.stringify(body);
    }
    const response = await fetch(url, options);
    let data = {};
    try {
      data = await response.json();
    } catch (exc) {
      data = {};
    }
    if (!response.ok) {
      const message = (data.error && data.error.message) || "The request failed (" + response.status + ").";
      throw new Error(message);
    }
    return data;
  }

  function setFigure(name, value) {
    const cell = card.querySelector('[data-figure="' + name + '"]');
    if (cell) cell.textContent = String(value);
  }

  function setRunFigure(name, value) {
    const cell = card.querySelector('[data-run="' + name + '"]');
    if (cell) cell.textContent = String(value);
  }

  async function preview() {
    showError("");
    state.textContent = "Previewing…";
    previewButton.disabled = true;
    try {
      const asked = range();
      const body = await call(card.dataset.url, { from: asked.from, to: asked.to, mode: "preview" });
      ["read", "considered", "matched", "failed"].forEach((k) => setFigure(k, body[k]));
      const incomplete = $("history-incomplete");
      incomplete.hidden = body.complete;
      incomplete.textContent = body.complete
        ? ""
        : body.unevaluated + " messages were not evaluated within the preview's time: a run counts them all.";
      $("history-outputs").textContent = body.outputs.length
        ? JSON.stringify(body.outputs, null, 2)
        : "No output in this range.";
      $("history-preview-result").hidden = false;
      $("history-preview-result").dataset.matched = String(body.matched);
      state.textContent = "Previewed in " + body.seconds + " s.";
      previewed = asked;
      if (runButton && following === null) {
        runButton.disabled = false;
        runButton.title = "";
      }
    } catch (exc) {
      showError(exc.message);
      state.textContent = "";
    } finally {
      previewButton.disabled = false;
    }
  }

  function rangeChanged() {
    if (!runButton) return;
    let now = null;
    try {
      now = range();
    } catch (exc) {
      now = null;
    }
    const same = now !== null && previewed && previewed.from === now.from && previewed.to === now.to;
    runButton.disabled = !same || following !== null;
    runButton.title = same ? "" : "Preview the range first";
  }

  async function run() {
    showError("");
    runButton.disabled = true;
    try {
      const asked = range();
      const asking = { from: asked.from, to: asked.to, mode: "run", actions: actions.value };
      if (onlyAction && onlyAction.value) asking.action = Number(onlyAction.value);
      const body = await call(card.dataset.url, asking);
      follow(body.id);
    } catch (exc) {
      showError(exc.message);
      rangeChanged();
    }
  }

  function show(run) {
    $("history-progress").hidden = false;
    $("history-progress").dataset.state = run.state;
    $("history-run-id").textContent = run.id;
    $("history-bar").value = run.progress;
    $("history-run-state").textContent = run.state + " · " + Math.round(run.progress * 100) + " %";
    setRunFigure("read", run.read);
    setRunFigure("matched", run.matched);
    setRunFigure("failed", run.failed);
    setRunFigure("actions", run.actions_fired + " / " + run.actions_skipped + " / " + run.actions_failed);
    const runError = $("history-run-error");
    runError.textContent = run.error || "";
    runError.hidden = !run.error;
    const ended = ["done", "failed", "cancelled"].indexOf(run.state) >= 0;
    if (cancelButton) cancelButton.hidden = ended || run.cancel_requested_at !== null;
    return ended;
  }

  async function poll() {
    if (following === null) return;
    try {
      const run = await call(card.dataset.url + "/" + following);
      if (show(run)) {
        following = null;
        state.textContent = "The run is " + run.state + ".";
        rangeChanged();
        return;
      }
    } catch (exc) {
      showError(exc.message);
    }
    setTimeout(poll, POLL_MS);
  }

  function follow(id) {
    following = id;
    if (runButton) runButton.disabled = true;
    state.textContent = "Running…";
    poll();
  }

  async function cancel() {
    if (following === null) return;
    cancelButton.disabled = true;
    try {
      show(await call(card.dataset.url + "/" + following + "/cancel", {}));
      state.textContent = "Cancelling…";
    } catch (exc) {
      showError(exc.message);
    } finally {
      cancelButton.disabled = false;
    }
  }

  previewButton.addEventListener("click", preview);
  if (runButton) runButton.addEventListener("click", run);
  if (cancelButton) cancelButton.addEventListener("click", cancel);
  from.addEventListener("input", rangeChanged);
  to.addEventListener("input", rangeChanged);
  if (card.dataset.activeRun) follow(card.dataset.activeRun);
})();
