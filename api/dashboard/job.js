/* The job page: draw the study's progress, and while the job is queued or running poll
 * GET /v1/jobs/{id} (status, progress, best so far) and the dashboard's progress JSON (the chart). */
(function () {
  "use strict";
  var TERMINAL = { succeeded: 1, failed: 1, cancelled: 1 };
  var POLL_MS = 1000;

  function text(id, v) { var n = document.getElementById(id); if (n) n.textContent = v; }

  var lastSeries = [];

  /* The trial that reached a bucket's best time (the final summary does not name it). */
  function bestTrial(bucket) {
    var s = lastSeries.find(function (x) { return x.bucket === bucket; });
    return s && s.best_number != null ? String(s.best_number) : "-";
  }

  function renderBest(best) {
    var body = document.getElementById("best-rows");
    var names = Object.keys(best || {}).sort();
    var rows = names.filter(function (k) { return best[k] && best[k].time_us != null; });
    while (body.firstChild) body.removeChild(body.firstChild);
    if (!rows.length) {
      var tr = body.insertRow(), td = tr.insertCell();
      td.colSpan = 5; td.className = "empty"; td.textContent = "no verified trial yet";
      return;
    }
    rows.forEach(function (k) {
      var b = best[k], tr = body.insertRow();
      tr.className = "best-row";
      tr.setAttribute("data-bucket", k);
      var sp = b.default_time_us && b.time_us ? b.default_time_us / b.time_us : null;
      [k, KvCharts.fmt(b.default_time_us), KvCharts.fmt(b.time_us), sp ? sp.toFixed(2) + "x" : "-",
       b.number != null ? String(b.number) : bestTrial(k)].forEach(function (v, i) {
        var td = tr.insertCell(); td.textContent = v; if (i > 0) td.className = "num";
      });
    });
  }

  function renderJob(j) {
    var section = document.getElementById("job");
    section.setAttribute("data-status", j.status);
    var st = document.getElementById("job-status");
    st.textContent = j.status; st.className = "status s-" + j.status;
    var p = j.progress || {}, bar = document.getElementById("bar");
    text("trials-done", p.trials_done || 0);
    if (p.trials_total) { text("trials-total", p.trials_total); bar.max = p.trials_total; }
    bar.value = p.trials_done || 0;
    text("job-attempt", j.attempt);
    var by = j.trials_by_status || {};
    text("by-status", Object.keys(by).sort().map(function (k) { return k + " " + by[k]; }).join(", ") || "none yet");
    var err = document.getElementById("job-error");
    err.textContent = j.error || ""; err.classList.toggle("hidden", !j.error);
    renderBest(j.best);
  }

  function drawProgress(series) {
    var prog = document.querySelector('[data-chart="progress"]');
    if (prog) KvCharts.line(prog, KvCharts.progressSpec(series));
  }

  function getJSON(url) {
    return fetch(url, { cache: "no-store", credentials: "omit" }).then(function (r) {
      if (!r.ok) throw new Error(url + ": HTTP " + r.status);
      return r.json();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var data = {};
    try { data = JSON.parse(document.getElementById("chart-data").textContent) || {}; } catch (e) { /* keep {} */ }
    var id = data.job_id, section = document.getElementById("job");
    drawProgress(data.progress);
    var wasActive = !TERMINAL[section.getAttribute("data-status")];
    function poll() {
      Promise.all([getJSON("/v1/jobs/" + id), getJSON("/dashboard/jobs/" + id + "/progress.json")]).then(function (res) {
        lastSeries = res[1].series || [];
        renderJob(res[0]);
        drawProgress(lastSeries);
        if (TERMINAL[res[0].status]) {
          document.getElementById("live").classList.add("hidden");
          // The published configs are rendered by the server: show them once the job has ended.
          if (wasActive && res[0].status === "succeeded") window.location.reload();
          return;
        }
        setTimeout(poll, POLL_MS);
      }).catch(function (e) {
        text("live", "· connection lost, retrying (" + e.message + ")");
        setTimeout(poll, POLL_MS * 3);
      });
    }
    poll();  // once even for an ended job: fills the best-so-far table from the job's final summary
    document.body.setAttribute("data-ready", "true");
  });
})();
