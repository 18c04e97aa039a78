/* The overview page: draw the charts from the page's JSON block, and wire the lookup-miss buttons to
 * POST /v1/tune with the token typed into the page (a bearer header; kept in sessionStorage only). */
(function () {
  "use strict";

  function chartData() {
    var node = document.getElementById("chart-data");
    try { return JSON.parse(node ? node.textContent : "{}") || {}; } catch (e) { return {}; }
  }

  function drawCharts(data) {
    document.querySelectorAll('[data-chart="speedup"]').forEach(function (div) {
      var c = (data.speedup || [])[+div.getAttribute("data-index")] || {};
      KvCharts.bar(div, { title: "speedup by bucket: " + c.kernel, labels: c.labels, values: c.values, counts: c.counts,
                          ref: 1, unit: "x", yLabel: "speedup (x)" });
    });
    var prog = document.querySelector('[data-chart="progress"]');
    if (prog) KvCharts.line(prog, KvCharts.progressSpec(data.progress));
  }

  function say(node, text, ok, href) {
    node.textContent = "";
    node.className = "status-line " + (ok ? "ok" : "err");
    node.setAttribute("data-state", ok ? "ok" : "error");
    node.appendChild(document.createTextNode(text));
    if (href) {
      var a = document.createElement("a");
      a.href = href;
      a.textContent = " (open)";
      node.appendChild(a);
    }
  }

  function detail(body) {
    if (body && typeof body.detail === "string") return body.detail;
    try { return JSON.stringify(body); } catch (e) { return String(body); }
  }

  function wireMisses() {
    var token = document.getElementById("token"), trials = document.getElementById("trials");
    var status = document.getElementById("tune-status");
    if (!token || !status) return;
    try { token.value = sessionStorage.getItem("kvtune-token") || ""; } catch (e) { /* storage disabled */ }
    token.addEventListener("change", function () {
      try { sessionStorage.setItem("kvtune-token", token.value); } catch (e) { /* storage disabled */ }
    });
    document.querySelectorAll("button.tune").forEach(function (btn) {
      btn.addEventListener("click", function () {
        var body;
        try { body = JSON.parse(btn.getAttribute("data-body")); } catch (e) { say(status, "bad key data", false); return; }
        var n = parseInt(trials && trials.value, 10);
        if (n > 0) body.trials = n;
        if (!token.value) { say(status, "type the API token first", false); return; }
        btn.disabled = true;
        status.removeAttribute("data-state");
        status.textContent = "submitting " + body.kernel + " on " + body.arch + "...";
        fetch("/v1/tune", {
          method: "POST",
          headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token.value },
          body: JSON.stringify(body), credentials: "omit", cache: "no-store"
        }).then(function (r) {
          return r.json().catch(function () { return {}; }).then(function (j) {
            if (r.status === 202 && j && j.id) say(status, "job #" + j.id + " queued for " + j.key_slug, true, "/dashboard/jobs/" + j.id);
            else say(status, "error " + r.status + ": " + detail(j), false);
          });
        }).catch(function (e) {
          say(status, "error: " + e, false);
        }).then(function () { btn.disabled = false; });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawCharts(chartData());
    wireMisses();
    document.body.setAttribute("data-ready", "true");
  });
})();
