/* kvtune charts: a bar chart and a line chart in plain SVG, no dependencies, nothing fetched.
 *
 * KvCharts.bar(container, {labels, values, counts?, ref?, yLabel?})
 *   one <rect class="bar"> per non-null value; null values get a "-" marker instead of a bar.
 * KvCharts.line(container, {series: [{name, points: [[x, y], ...]}], xLabel?, yLabel?}), y from 0
 *   one <path class="line"> per series with data-points = its point count, one <circle class="pt"> per point.
 * Both replace the container's content with one <svg> (viewBox-scaled, so no layout measuring) and
 * draw "no data" when there is nothing to plot. Text goes in through textContent only (never HTML).
 */
(function (global) {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  // The drawing size of the chart being drawn (its viewBox; the SVG scales to its container).
  // Set by bar()/line() before drawing: JavaScript runs one chart at a time, so a shared pair is safe.
  var W = 560, H = 260, M = { top: 14, right: 16, bottom: 56, left: 58 };
  function size(w, h) { W = w; H = h; }
  var PALETTE = ["#2f6fde", "#e8710a", "#137333", "#a142f4", "#b3261e", "#0b8043", "#c5221f", "#5f6368"];

  function el(name, attrs, parent, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = String(text);
    if (parent) parent.appendChild(e);
    return e;
  }

  function finite(v) { return typeof v === "number" && isFinite(v); }

  /* Round tick steps (1, 2, 5 x 10^k) covering [lo, hi]. */
  function ticks(lo, hi, n) {
    if (!(hi > lo)) { hi = lo + 1; }
    var raw = (hi - lo) / Math.max(1, n), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * mag; }).find(function (s) { return s >= raw; }) || raw;
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
    return out;
  }

  /* The one number format of the dashboard, the same as the tables' (api/routes/dashboard.py `_us`):
   * thousands separated and whole from 1000 on, one decimal from 10, two below. */
  function fmt(v) {
    if (!finite(v)) return "-";
    var a = Math.abs(v);
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  /* Axis labels: the same format with trailing zeros dropped (0, 0.5, 1, 2.5, 20,000). */
  function tickFmt(v) {
    var s = fmt(v);
    return s.indexOf(".") >= 0 ? s.replace(/\.?0+$/, "") : s;
  }

  function svgFor(container, label) {
    while (container.firstChild) container.removeChild(container.firstChild);
    return el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": label, preserveAspectRatio: "xMidYMid meet" }, container);
  }

  function noData(svg, why) {
    svg.setAttribute("data-empty", "true");
    el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "nodata" }, svg, why || "no data");
    return svg;
  }

  function yAxis(svg, y, lo, hi, label) {
    var g = el("g", { class: "axis y" }, svg), grid = el("g", { class: "grid" }, svg);
    ticks(lo, hi, 5).forEach(function (t) {
      var py = y(t);
      el("line", { x1: M.left, x2: W - M.right, y1: py, y2: py }, grid);
      el("text", { x: M.left - 6, y: py + 4, "text-anchor": "end" }, g, tickFmt(t));
    });
    el("line", { x1: M.left, x2: M.left, y1: M.top, y2: y(lo) }, g);
    var mid = (M.top + y(lo)) / 2;
    if (label) el("text", { x: 12, y: mid, "text-anchor": "middle", transform: "rotate(-90 12 " + mid + ")" }, g, label);
  }

  function bar(container, spec) {
    size(560, 260);
    var labels = (spec && spec.labels) || [], values = (spec && spec.values) || [], counts = (spec && spec.counts) || [];
    var svg = svgFor(container, spec && spec.title || "bar chart");
    svg.setAttribute("data-kind", "bar");
    var good = values.filter(finite);
    if (!labels.length || !good.length) return noData(svg);
    var ref = finite(spec.ref) ? spec.ref : null;
    var hi = Math.max.apply(null, good.concat(ref === null ? [] : [ref])) * 1.12;
    var y = function (v) { return H - M.bottom - (v / hi) * (H - M.top - M.bottom); };
    yAxis(svg, y, 0, hi, spec.yLabel);
    var slot = (W - M.left - M.right) / labels.length, bw = Math.max(2, Math.min(48, slot * 0.7));
    var bars = el("g", { class: "bars" }, svg), xg = el("g", { class: "axis x" }, svg);
    el("line", { x1: M.left, x2: W - M.right, y1: H - M.bottom, y2: H - M.bottom }, xg);
    var rotate = labels.length > 6;
    labels.forEach(function (label, i) {
      var cx = M.left + slot * (i + 0.5), v = values[i];
      if (finite(v)) {
        var r = el("rect", { class: "bar", x: cx - bw / 2, y: y(v), width: bw, height: Math.max(0.5, H - M.bottom - y(v)),
                             fill: ref !== null && v < ref ? "#d93025" : PALETTE[0], "data-label": label, "data-value": v }, bars);
        el("title", {}, r, label + ": " + fmt(v) + (spec.unit || "") + (counts[i] ? " (" + counts[i] + " keys)" : ""));
        if (labels.length <= 12) el("text", { x: cx, y: y(v) - 4, "text-anchor": "middle", class: "value" }, bars,
                                    spec.unit === "x" ? v.toFixed(2) + "x" : fmt(v));
      } else {
        el("text", { x: cx, y: H - M.bottom - 4, "text-anchor": "middle", class: "na" }, bars, "-");
      }
      var ty = H - M.bottom + 14;
      el("text", rotate ? { x: cx, y: ty, "text-anchor": "end", transform: "rotate(-35 " + cx + " " + ty + ")" }
                        : { x: cx, y: ty, "text-anchor": "middle" }, xg, label);
    });
    if (ref !== null) el("line", { class: "ref", x1: M.left, x2: W - M.right, y1: y(ref), y2: y(ref) }, svg);
    return svg;
  }

  function line(container, spec) {
    size(860, 320);
    var series = ((spec && spec.series) || []).map(function (s) {
      return { name: String(s.name), points: (s.points || []).filter(function (p) { return p && finite(p[0]) && finite(p[1]); }) };
    }).filter(function (s) { return s.points.length; });
    var svg = svgFor(container, spec && spec.title || "line chart");
    svg.setAttribute("data-kind", "line");
    if (!series.length) return noData(svg, spec && spec.empty);
    var xs = [], ys = [];
    series.forEach(function (s) { s.points.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    // Times from 0, so the drop from the default to the best reads at its true proportion.
    y0 = 0; y1 += y1 * 0.08 || 1;
    var legendRows = Math.ceil(series.length / 4), plotBottom = H - 40 - 14 * legendRows;
    var x = function (v) { return M.left + (v - x0) / (x1 - x0) * (W - M.left - M.right); };
    var y = function (v) { return plotBottom - (v - y0) / (y1 - y0) * (plotBottom - M.top); };
    yAxis(svg, y, y0, y1, spec.yLabel);
    var xg = el("g", { class: "axis x" }, svg);
    el("line", { x1: M.left, x2: W - M.right, y1: plotBottom, y2: plotBottom }, xg);
    ticks(x0, x1, 8).forEach(function (t) {
      if (t < x0 || t > x1 || t !== Math.round(t)) return;  // x counts trials: whole numbers only
      el("text", { x: x(t), y: plotBottom + 14, "text-anchor": "middle" }, xg, tickFmt(t));
    });
    if (spec.xLabel) el("text", { x: (M.left + W - M.right) / 2, y: plotBottom + 27, "text-anchor": "middle" }, xg, spec.xLabel);
    series.forEach(function (s, i) {
      var color = PALETTE[i % PALETTE.length];
      var d = s.points.map(function (p, j) { return (j ? "L" : "M") + x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1); }).join(" ");
      var g = el("g", { class: "series", "data-name": s.name }, svg);
      el("path", { class: "line", d: d, fill: "none", stroke: color, "stroke-width": 2, "data-points": s.points.length }, g);
      s.points.forEach(function (p) {
        var c = el("circle", { class: "pt", cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 3, fill: color }, g);
        el("title", {}, c, s.name + " after " + p[0] + " trials: " + fmt(p[1]) + " \u00b5s");
      });
      var lx = M.left + (i % 4) * 125, ly = plotBottom + 46 + Math.floor(i / 4) * 14;
      el("rect", { x: lx, y: ly - 8, width: 10, height: 10, fill: color }, svg);
      el("text", { x: lx + 14, y: ly + 1, class: "legend" }, svg, s.name);
    });
    return svg;
  }

  /* The study-progress spec both pages draw: best time so far against trials measured, per bucket. */
  function progressSpec(series) {
    return {
      title: "study progress", xLabel: "trials measured", yLabel: "best time so far (\u00b5s)", empty: "no verified trial yet",
      series: (series || []).map(function (s) { return { name: s.bucket, points: s.best }; })
    };
  }

  global.KvCharts = { bar: bar, line: line, progressSpec: progressSpec, fmt: fmt };
})(window);
