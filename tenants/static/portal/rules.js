// Rules pages, plain JS (no build step).
// - The list (#rules) refreshes each rule's counters from GET /api/v1/rules every few seconds,
//   as the rule jobs write them.
// - The editor: as the SQL or the sample message changes, ask the dry run
//   (POST /api/v1/rules/test, with this session and its CSRF token) and show the outputs, or the
//   error with its line and column marked under the SQL.
(function () {
  "use strict";
  const table = document.getElementById("rules");
  if (!table) return;
  const REFRESH_MS = 5000;

  function setCell(row, name, text, muted) {
    const cell = row.querySelector('[data-metric="' + name + '"]');
    if (!cell) return;
    cell.textContent = ""; // rebuilt with textContent only: errors echo user data
    const span = document.createElement("span");
    span.className = muted ? "muted" : name === "last_error" ? "error" : "";
    span.textContent = text;
    cell.appendChild(span);
  }

  async function refresh() {
    if (document.hidden) return;
    let body;
    try {
      const response = await fetch(table.dataset.url, {
        credentials: "same-origin",
        headers: { "X-Tenant": table.dataset.tenant, Accept: "application/json" },
      });
      if (!response.ok) return;
      body = await response.json();
    } catch (exc) {
      return; // next tick tries again
    }
    (body.results || []).forEach((rule) => {
      const row = Array.from(table.querySelectorAll("tr[data-rule]")).find(
        (tr) => tr.dataset.rule === rule.name
      );
      if (!row) return;
      const m = rule.metrics;
      ["matched", "passed", "failed", "actions_ok", "actions_failed"].forEach((key) => {
        setCell(row, key, String(m[key]));
      });
      setCell(row, "dead_letters", String(rule.dead_letters));
      setCell(row, "last_error", m.last_error || "none", !m.last_error);
      setCell(row, "lag_ms", m.lag_ms === null ? "–" : m.lag_ms + " ms", m.lag_ms === null);
    });
  }

  setInterval(refresh, REFRESH_MS);
})();

(function () {
  "use strict";
  const tester = document.getElementById("rule-tester");
  const sql = document.getElementById("id_sql");
  if (!tester || !sql) return;
  const form = document.getElementById("rule-form");
  const output = document.getElementById("test-output");
  const error = document.getElementById("test-error");
  const where = document.getElementById("test-error-where");
  const state = document.getElementById("test-state");
  const field = (name) => document.getElementById("sample-" + name);
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  let sequence = 0;
  let timer = null;

  // The SQL line the error is on, with a caret under its column (both 1-based).
  function caret(text, line, column) {
    const lines = text.split("\n");
    const source = lines[line - 1] === undefined ? "" : lines[line - 1];
    const pad = " ".repeat(Math.max(0, (column || 1) - 1));
    return "line " + line + ", column " + (column || 1) + ":\n" + source + "\n" + pad + "^";
  }

  // Select the character at line/column in the SQL box, so the cursor lands on the problem.
  function selectPosition(line, column) {
    const lines = sql.value.split("\n");
    let offset = 0;
    for (let i = 0; i < line - 1 && i < lines.length; i += 1) offset += lines[i].length + 1;
    offset += Math.max(0, (column || 1) - 1);
    sql.setSelectionRange(offset, Math.min(sql.value.length, offset + 1));
  }

  function showError(message, line, column) {
    error.textContent = message; // textContent: messages echo user input
    error.hidden = false;
    output.hidden = true;
    if (line) {
      where.textContent = caret(sql.value, line, column);
      where.hidden = false;
      sql.classList.add("invalid");
    } else {
      where.hidden = true;
    }
  }

  function clearError() {
    error.hidden = true;
    where.hidden = true;
    sql.classList.remove("invalid");
  }

  function context() {
    let properties = {};
    const raw = field("user-properties").value.trim();
    if (raw) {
      properties = JSON.parse(raw); // a SyntaxError is reported by run()
      if (properties === null || typeof properties !== "object" || Array.isArray(properties)) {
        throw new SyntaxError("must be a JSON object");
      }
    }
    return {
      topic: field("topic").value,
      qos: Number(field("qos").value),
      clientid: field("clientid").value,
      username: field("username").value,
      payload: field("payload").value,
      user_properties: properties,
    };
  }

  async function run() {
    const mine = (sequence += 1);
    let body;
    try {
      body = { sql: sql.value, context: context() };
    } catch (exc) {
      showError("User properties: " + exc.message);
      return;
    }
    if (!sql.value.trim()) return;
    state.textContent = "running…";
    let response;
    let answer;
    try {
      response = await fetch(tester.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "Content-Type": "application/json",
          "X-CSRFToken": csrf,
          "X-Tenant": tester.dataset.tenant,
        },
        body: JSON.stringify(body),
      });
      answer = await response.json();
    } catch (exc) {
      if (mine === sequence) showError("Could not reach the dry run: " + exc.message);
      state.textContent = "";
      return;
    }
    if (mine !== sequence) return; // a newer edit already asked
    state.textContent = "";
    if (response.ok) {
      clearError();
      output.hidden = false;
      output.textContent = answer.match
        ? JSON.stringify(answer.outputs, null, 2)
        : "No match: the FROM filter or the WHERE condition did not hold.";
      output.dataset.match = String(answer.match);
      return;
    }
    const problem = answer.error || {};
    showError(problem.message || "HTTP " + response.status, problem.line, problem.column);
    output.dataset.match = "";
  }

  function soon() {
    clearTimeout(timer);
    timer = setTimeout(run, 350);
  }

  sql.addEventListener("input", soon);
  tester.querySelectorAll("input, select, textarea").forEach((el) => {
    el.addEventListener("input", soon);
  });
  document.getElementById("run-test").addEventListener("click", () => {
    clearTimeout(timer);
    run();
  });

  // Saved with an SQL error: the server says where; mark it as the dry run would.
  if (form && form.dataset.line) {
    const line = Number(form.dataset.line);
    const column = Number(form.dataset.column) || 1;
    sql.classList.add("invalid");
    where.textContent = caret(sql.value, line, column);
    where.hidden = false;
    sql.focus();
    selectPosition(line, column);
  } else if (sql.value.trim()) {
    run();
  }
})();
