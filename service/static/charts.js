// Minimal SVG charts: lines with points, log or linear axes, a legend. No dependencies.
"use strict";

const KTCharts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#2b6cb0", "#c05621", "#2f855a", "#9b2c2c", "#6b46c1", "#b7791f", "#2c7a7b", "#97266d",
                   "#4a5568", "#dd6b20"];

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  function scale(domain, range, log) {
    const f = log ? Math.log : (v) => v;
    let [d0, d1] = domain.map(f);
    if (d0 === d1) { d0 -= log ? 0.5 : 1; d1 += log ? 0.5 : 1; }
    const s = (v) => range[0] + ((f(v) - d0) / (d1 - d0)) * (range[1] - range[0]);
    return s;
  }

  function ticks(lo, hi, log) {
    if (log) {
      const out = [];
      const base = hi / lo > 1e3 ? 10 : 2;
      let t = Math.pow(base, Math.floor(Math.log(lo) / Math.log(base)));
      while (t <= hi * 1.0001) { if (t >= lo / 1.0001) out.push(t); t *= base; }
      return out.length >= 2 ? out : [lo, hi];
    }
    const span = hi - lo || 1;
    const step = Math.pow(10, Math.floor(Math.log10(span / 4)));
    const nice = [1, 2, 5, 10].map((m) => m * step).find((s) => span / s <= 6) || step * 10;
    const out = [];
    for (let t = Math.ceil(lo / nice) * nice; t <= hi + 1e-9; t += nice) out.push(+t.toPrecision(12));
    return out;
  }

  function fmt(v) {
    if (Math.abs(v) >= 1000) return v.toExponential(0);
    return +v.toPrecision(3) + "";
  }

  // spec: {series: [{name, points: [{x, y, title}], dashed, color}], xLabel, yLabel, xLog, yLog, refY}
  function lineChart(container, spec) {
    container.replaceChildren();
    const series = spec.series.filter((s) => s.points.length);
    if (!series.length) {
      const p = document.createElement("p");
      p.className = "empty";
      p.textContent = spec.empty || "No data yet.";
      container.appendChild(p);
      return;
    }
    const W = 560, H = 300, m = { l: 56, r: 12, t: 10, b: 40 };
    const legendRows = Math.ceil(series.length / 2);
    const svg = el("svg", { viewBox: `0 0 ${W} ${H + legendRows * 16}`, role: "img",
                            "aria-label": spec.label || "chart" }, container);
    const xs = series.flatMap((s) => s.points.map((p) => p.x));
    const ys = series.flatMap((s) => s.points.map((p) => p.y));
    if (spec.refY !== undefined) ys.push(spec.refY);
    let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
    let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    if (spec.yLog) { y0 /= 1.25; y1 *= 1.25; } else { const pad = (y1 - y0) * 0.08 || 0.1; y0 -= pad; y1 += pad; }
    if (spec.xLog && x0 === x1) { x0 /= 2; x1 *= 2; }
    const sx = scale([x0, x1], [m.l, W - m.r], spec.xLog);
    const sy = scale([y0, y1], [H - m.b, m.t], spec.yLog);

    const grid = el("g", { class: "grid" }, svg);
    const axis = el("g", { class: "axis" }, svg);
    el("line", { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }, axis);
    el("line", { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b }, axis);
    for (const t of ticks(x0, x1, spec.xLog)) {
      el("line", { x1: sx(t), x2: sx(t), y1: m.t, y2: H - m.b }, grid);
      el("text", { x: sx(t), y: H - m.b + 14, "text-anchor": "middle" }, axis).textContent = fmt(t);
    }
    for (const t of ticks(y0, y1, spec.yLog)) {
      el("line", { x1: m.l, x2: W - m.r, y1: sy(t), y2: sy(t) }, grid);
      el("text", { x: m.l - 5, y: sy(t) + 4, "text-anchor": "end" }, axis).textContent = fmt(t);
    }
    el("text", { x: (m.l + W - m.r) / 2, y: H - 6, "text-anchor": "middle" }, axis).textContent = spec.xLabel || "";
    el("text", { x: 12, y: (m.t + H - m.b) / 2, "text-anchor": "middle",
                 transform: `rotate(-90 12 ${(m.t + H - m.b) / 2})` }, axis).textContent = spec.yLabel || "";
    if (spec.refY !== undefined) {
      el("line", { class: "ref", x1: m.l, x2: W - m.r, y1: sy(spec.refY), y2: sy(spec.refY),
                   stroke: "#c2413b", "stroke-dasharray": "2 3" }, svg);
    }

    const legend = el("g", { class: "legend" }, svg);
    series.forEach((s, i) => {
      const color = s.color || PALETTE[i % PALETTE.length];
      const g = el("g", { class: "series", "data-name": s.name }, svg);
      const pts = [...s.points].sort((a, b) => a.x - b.x);
      const d = pts.map((p, j) => `${j ? "L" : "M"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join("");
      el("path", { d, fill: "none", stroke: color, "stroke-width": 1.8,
                   "stroke-dasharray": s.dashed ? "5 4" : "none" }, g);
      for (const p of pts) {
        const c = el("circle", { class: "pt", cx: sx(p.x).toFixed(1), cy: sy(p.y).toFixed(1), r: 3.2, fill: color,
                                 "data-x": p.x, "data-y": p.y }, g);
        el("title", {}, c).textContent = p.title || `${s.name}: ${fmt(p.x)}, ${fmt(p.y)}`;
      }
      const lx = m.l + (i % 2) * ((W - m.l) / 2), ly = H + 4 + Math.floor(i / 2) * 16;
      el("line", { x1: lx, x2: lx + 16, y1: ly + 4, y2: ly + 4, stroke: color, "stroke-width": 2,
                   "stroke-dasharray": s.dashed ? "5 4" : "none" }, legend);
      el("text", { x: lx + 20, y: ly + 8 }, legend).textContent = s.name;
    });
  }

  return { lineChart, PALETTE };
})();
