// appliance web view: live run updates (server-sent events, polling as a fallback), the
// batch page's live progress and the history page's select-all box. Plain script, no
// library; every request goes to this server.
"use strict";

(function () {
  function text(el, value) { if (el) { el.textContent = value; } }

  function fmtSeconds(s) {
    if (s === null || s === undefined || isNaN(s)) { return "–"; }
    s = Math.max(0, Math.round(s));
    var m = Math.floor(s / 60), r = s % 60;
    return m ? m + " min " + (r < 10 ? "0" : "") + r + " s" : r + " s";
  }

  function setBadge(el, status) {
    if (!el) { return; }
    el.className = "badge " + String(status).replace(/\s+/g, "-");
    el.textContent = status;
  }

  function liveRun(root) {
    var id = root.getAttribute("data-run-id");
    var finished = { done: 1, failed: 1, cancelled: 1 };
    var elapsedAt = null;     // [elapsed seconds when received, local ms then]
    var running = false;
    var source = null;

    function renderNodes(nodes) {
      var body = document.getElementById("nodes");
      if (!body) { return; }
      var ids = Object.keys(nodes);
      body.textContent = "";
      if (!ids.length) {
        var tr = document.createElement("tr"), td = document.createElement("td");
        td.colSpan = 3; td.className = "empty"; td.textContent = "No sub-question yet: the plan comes first.";
        tr.appendChild(td); body.appendChild(tr);
        return;
      }
      ids.forEach(function (nid) {
        var node = nodes[nid], tr = document.createElement("tr");
        tr.setAttribute("data-node", nid);
        var a = document.createElement("td"); a.className = "nowrap muted"; a.textContent = nid;
        var b = document.createElement("td"); b.textContent = node.question;
        var c = document.createElement("td"); var badge = document.createElement("span");
        setBadge(badge, node.status); c.appendChild(badge);
        tr.appendChild(a); tr.appendChild(b); tr.appendChild(c); body.appendChild(tr);
      });
    }

    function render(job) {
      setBadge(document.getElementById("run-status"), job.status);
      text(document.getElementById("run-phase"), job.phase || "waiting in the queue");
      var nodes = job.nodes || {}, counts = { total: 0, done: 0, running: 0, failed: 0 };
      Object.keys(nodes).forEach(function (k) {
        var s = nodes[k].status; counts.total += 1;
        if (s === "in progress") { counts.running += 1; } else if (s === "failed") { counts.failed += 1; } else { counts.done += 1; }
      });
      text(document.getElementById("n-total"), counts.total);
      text(document.getElementById("n-done"), counts.done);
      text(document.getElementById("n-running"), counts.running);
      text(document.getElementById("n-failed"), counts.failed);
      renderNodes(nodes);
      running = job.status === "running";
      elapsedAt = job.elapsed === null ? null : [job.elapsed, Date.now()];
      tick();
      var link = document.getElementById("report-link");
      if (link && job.has_report) { link.hidden = false; }
      var cancel = document.getElementById("cancel-form");
      if (cancel && finished[job.status]) { cancel.hidden = true; }
      var err = document.getElementById("run-error");
      if (err) { err.hidden = !job.error; text(err, job.error || ""); }
      root.setAttribute("data-status", job.status);
    }

    function tick() {
      var el = document.getElementById("run-elapsed");
      if (!el) { return; }
      if (!elapsedAt) { el.textContent = "–"; return; }
      var extra = running ? (Date.now() - elapsedAt[1]) / 1000 : 0;
      el.textContent = fmtSeconds(elapsedAt[0] + extra);
    }

    function poll() {
      fetch("/api/runs/" + id, { credentials: "same-origin", headers: { accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (job) {
          if (!job) { return; }
          render(job);
          if (!finished[job.status]) { setTimeout(poll, 2000); }
        })
        .catch(function () { setTimeout(poll, 4000); });
    }

    function listen() {
      if (!window.EventSource) { poll(); return; }
      source = new EventSource("/api/runs/" + id + "/events");
      source.addEventListener("status", function (e) { render(JSON.parse(e.data)); });
      source.addEventListener("end", function () { source.close(); poll(); });
      source.addEventListener("gone", function () { source.close(); text(document.getElementById("run-phase"), "deleted"); });
      source.onerror = function () { source.close(); setTimeout(poll, 1000); };
    }

    var initial = document.getElementById("run-data");
    if (initial) { render(JSON.parse(initial.textContent)); }
    setInterval(tick, 1000);
    if (!finished[root.getAttribute("data-status")]) { listen(); }
  }

  // The batch page: every run of the batch followed through one request
  // (GET /api/runs?ids=...) every two seconds until all have finished.
  function liveBatch(root) {
    var ids = root.getAttribute("data-batch-ids");
    var finished = { done: 1, failed: 1, cancelled: 1 };

    function renderRow(run) {
      var row = root.querySelector('tr[data-job="' + run.id + '"]');
      if (!row) { return; }
      setBadge(row.querySelector(".st .badge"), run.status);
      text(row.querySelector(".dur"), fmtSeconds(run.elapsed));
      var tokens = run.stats && run.stats.tokens_generated;
      text(row.querySelector(".tok"), tokens === undefined || tokens === null ? "–" : String(tokens));
      var rep = row.querySelector(".rep");
      if (rep && run.has_report && !rep.querySelector("a")) {
        var a = document.createElement("a");
        a.href = "/runs/" + run.id + "/report"; a.textContent = "report";
        rep.appendChild(a);
      }
    }

    function render(data) {
      data.runs.forEach(renderRow);
      data.missing.forEach(function (id) {
        var row = root.querySelector('tr[data-job="' + id + '"]');
        if (row) { setBadge(row.querySelector(".st .badge"), "deleted"); }
      });
      Object.keys(data.counts).forEach(function (s) {
        text(root.querySelector('[data-count="' + s + '"]'), s + " " + data.counts[s]);
      });
      var total = data.runs.length, done = 0;
      data.runs.forEach(function (r) { if (finished[r.status]) { done += 1; } });
      var bar = document.getElementById("batch-bar");
      if (bar) { bar.max = Math.max(1, total); bar.value = done; bar.textContent = done + " of " + total; }
      text(document.getElementById("batch-done"), done + " of " + total + " finished");
      text(document.getElementById("batch-deleted"), String(data.missing.length));
      return done === total;
    }

    function poll() {
      fetch("/api/runs?ids=" + encodeURIComponent(ids), { credentials: "same-origin", headers: { accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) {
          if (!data) { setTimeout(poll, 5000); return; }
          if (render(data)) {
            text(document.getElementById("batch-live-note"), "Every run has finished.");
            root.setAttribute("data-live", "");
          } else {
            setTimeout(poll, 2000);
          }
        })
        .catch(function () { setTimeout(poll, 5000); });
    }

    if (ids && root.getAttribute("data-live")) { poll(); }
  }

  function selectAll(box) {
    box.addEventListener("change", function () {
      document.querySelectorAll("input[name=ids]").forEach(function (b) { b.checked = box.checked; });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.querySelector("[data-run-id]");
    if (root) { liveRun(root); }
    var batch = document.getElementById("batch-live");
    if (batch) { liveBatch(batch); }
    var all = document.getElementById("select-all");
    if (all) { selectAll(all); }
  });
})();
