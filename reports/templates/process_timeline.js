// The per-process timeline (timeline.html): one canvas redrawn on every zoom or pan.
// Ops are sorted by invoke time, so a view only walks the ops that can reach it; bars
// narrower than two pixels are binned per lane and pixel column, which keeps 10^5 ops to a few
// thousand fills per frame.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("pt-data").textContent);
  const canvas = document.getElementById("pt-canvas");
  const ctx = canvas.getContext("2d");
  const tip = document.getElementById("pt-tip");
  const GUTTER = 64, AXIS = 34, LONG_MS = 5000;
  // outcome index (ok, fail, info, pending) -> how strongly it claims a shared pixel, and back
  const SEVERITY = [1, 4, 3, 2], BY_SEVERITY = [-1, 0, 3, 2, 1];
  const n = D.start.length;
  const laneH = Math.max(7, Math.min(20, Math.floor(560 / D.lanes.length)));
  const witness = new Set(D.witness);
  // ops longer than LONG_MS are checked in every view; the rest from (t0 - LONG_MS) on
  const long = [];
  const byLane = D.lanes.map(() => []);
  for (let i = 0; i < n; i++) {
    if (D.end[i] - D.start[i] > LONG_MS) long.push(i);
    byLane[D.lane[i]].push(i);
  }
  const minT = D.faults.reduce((m, f) => Math.min(m, f.start), 0);
  const fullEnd = Math.max(D.end_ms, 1);
  let t0 = minT, t1 = fullEnd;

  function lowerBound(arr, x, key) {
    let lo = 0, hi = arr.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (key(arr, mid) < x) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
  // the canvas's width is read once per frame: reading clientWidth per op forces a layout
  let cssWidth = canvas.clientWidth;
  const width = () => cssWidth;
  const plotW = () => Math.max(10, cssWidth - GUTTER - 8);
  const xOf = (t) => GUTTER + ((t - t0) / (t1 - t0)) * plotW();
  const tOf = (x) => t0 + ((x - GUTTER) / plotW()) * (t1 - t0);
  const laneTop = (lane) => AXIS + lane * laneH;

  function niceStep(span, px) {
    const raw = span / Math.max(1, px / 90);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (raw <= m * p) return m * p;
    return 10 * p;
  }

  function draw() {
    const began = performance.now();
    cssWidth = canvas.clientWidth;
    const dpr = window.devicePixelRatio || 1;
    const h = AXIS + D.lanes.length * laneH + 6;
    canvas.style.height = h + "px";
    canvas.width = Math.round(width() * dpr);
    canvas.height = Math.round(h * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width(), h);
    const bottom = laneTop(D.lanes.length);
    // lanes: alternate shading, labels in the gutter
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (let l = 0; l < D.lanes.length; l++) {
      if (l % 2) { ctx.fillStyle = "#f6f6f8"; ctx.fillRect(GUTTER, laneTop(l), plotW(), laneH); }
      if (laneH >= 9 || l % Math.ceil(9 / laneH) === 0) {
        ctx.fillStyle = "#333";
        ctx.fillText(D.lanes[l], 4, laneTop(l) + laneH / 2);
      }
    }
    ctx.save();
    ctx.beginPath(); ctx.rect(GUTTER, 0, plotW(), h); ctx.clip();
    // fault windows: a band over every lane, a labelled bar in the nemesis lane
    for (const f of D.faults) {
      const x0 = xOf(f.start), x1 = Math.max(xOf(f.end), x0 + 2);
      const colour = D.fault_colours[f.kind] || "#888";
      ctx.globalAlpha = 0.14; ctx.fillStyle = colour;
      ctx.fillRect(x0, AXIS, x1 - x0, bottom - AXIS);
      ctx.globalAlpha = 0.85;
      ctx.fillRect(x0, laneTop(0) + 1, x1 - x0, laneH - 2);
      ctx.globalAlpha = 1;
      if (x1 - x0 > 40 && laneH >= 10) {
        ctx.fillStyle = "#fff"; ctx.fillText(f.kind, Math.max(x0, GUTTER) + 3, laneTop(0) + laneH / 2);
      }
    }
    // ops: a bar two pixels wide or more is drawn as itself; narrower ones are binned into
    // one cell per lane and pixel column that shows the worst outcome in it (fail > info >
    // pending > ok), then each run of equal cells is one fill
    const W = Math.ceil(plotW()) + 1, L = D.lanes.length;
    const cells = new Uint8Array(L * W);
    const drawOp = (i) => {
      const s = D.start[i], e = D.end[i];
      if (e < t0 || s > t1) return;
      const x0 = xOf(s), x1 = xOf(e), lane = D.lane[i], o = D.out[i];
      if (x1 - x0 >= 2) {
        ctx.fillStyle = D.outcome_colours[o];
        ctx.fillRect(x0, laneTop(lane) + 1, x1 - x0, laneH - 2);
        return;
      }
      const col = Math.max(0, Math.min(W - 1, Math.floor(x0 - GUTTER)));
      const k = lane * W + col, sev = SEVERITY[o];
      if (sev > cells[k]) cells[k] = sev;
    };
    const from = lowerBound(D.start, t0 - LONG_MS, (a, m) => a[m]);
    for (let i = from; i < n && D.start[i] <= t1; i++) drawOp(i);
    for (const i of long) if (D.start[i] < t0 - LONG_MS) drawOp(i);
    for (let lane = 0; lane < L; lane++) {
      let c = 0;
      while (c < W) {
        const sev = cells[lane * W + c];
        let run = c + 1;
        while (run < W && cells[lane * W + run] === sev) run++;
        if (sev) {
          ctx.fillStyle = D.outcome_colours[BY_SEVERITY[sev]];
          ctx.fillRect(GUTTER + c, laneTop(lane) + 1, Math.max(1, run - c), laneH - 2);
        }
        c = run;
      }
    }
    // witnesses of anomalies: outlined, drawn last so nothing hides them
    ctx.strokeStyle = "#7a0000"; ctx.lineWidth = 2;
    for (const i of D.witness) {
      if (D.end[i] < t0 || D.start[i] > t1) continue;
      const x0 = xOf(D.start[i]), x1 = Math.max(xOf(D.end[i]), x0 + 3);
      ctx.strokeRect(x0 - 1, laneTop(D.lane[i]), x1 - x0 + 2, laneH);
    }
    // DDL activations: a line across every lane (a bar it crosses straddles the activation)
    ctx.strokeStyle = D.activation_colour; ctx.lineWidth = 1.5;
    ctx.fillStyle = D.activation_colour; ctx.textBaseline = "top";
    let lastLabel = -1e9;
    for (const a of D.activations) {
      if (a.t < t0 || a.t > t1) continue;
      const x = Math.round(xOf(a.t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, AXIS - 8); ctx.lineTo(x, bottom); ctx.stroke();
      if (x - lastLabel > 26) { ctx.fillText("v" + a.v, x + 2, 18); lastLabel = x; }
    }
    // DDL acknowledgements: open triangles on the axis
    ctx.strokeStyle = "#000"; ctx.lineWidth = 1;
    for (const a of D.acks) {
      if (a.t < t0 || a.t > t1) continue;
      const x = xOf(a.t);
      ctx.beginPath(); ctx.moveTo(x - 4, AXIS - 9); ctx.lineTo(x + 4, AXIS - 9);
      ctx.lineTo(x, AXIS - 2); ctx.closePath(); ctx.stroke();
    }
    ctx.restore();
    // time axis
    ctx.fillStyle = "#333"; ctx.strokeStyle = "#999"; ctx.textBaseline = "top";
    const step = niceStep(t1 - t0, plotW());
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const x = Math.round(xOf(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, 6); ctx.stroke();
      const label = step >= 1000 ? (t / 1000).toFixed(0) + " s" : (t / 1000).toFixed(3 - Math.floor(Math.log10(step))) + " s";
      ctx.fillText(label, x + 2, 2);
    }
    document.getElementById("pt-range").textContent =
      (t0 / 1000).toFixed(3) + " s – " + (t1 / 1000).toFixed(3) + " s";
    document.body.dataset.drawMs = (performance.now() - began).toFixed(1);
    document.body.dataset.ready = "1";
  }

  function zoom(factor, atX) {
    const at = tOf(atX === undefined ? GUTTER + plotW() / 2 : atX);
    const span = Math.max(2, (t1 - t0) * factor);
    t0 = at - (at - t0) * (span / (t1 - t0));
    t1 = t0 + span;
    draw();
  }
  function opAt(x, y) {
    const lane = Math.floor((y - AXIS) / laneH);
    if (lane < 1 || lane >= D.lanes.length) return -1;
    const t = tOf(x), tol = 3 * (t1 - t0) / plotW();
    const ids = byLane[lane];
    let k = lowerBound(ids, t + tol, (a, m) => D.start[a[m]]) - 1;
    for (let seen = 0; k >= 0 && seen < 50; k--, seen++) {
      if (D.end[ids[k]] >= t - tol) return ids[k];
    }
    return -1;
  }
  function describe(i) {
    const err = D.err[i] >= 0 ? "  error " + D.error_names[D.err[i]] : "";
    return "event " + D.inv[i] + "  process " + D.proc[i] + "  " + D.f_names[D.f[i]] +
      "  " + D.outcomes[D.out[i]] + err + "\n" +
      (D.start[i] / 1000).toFixed(3) + " s → " + (D.end[i] / 1000).toFixed(3) + " s (" +
      (D.end[i] - D.start[i]) + " ms)" + (D.node[i] >= 0 ? "  on " + D.node_names[D.node[i]] : "") +
      (witness.has(i) ? "  ANOMALY WITNESS" : "") + "\n" + D.sum[i];
  }
  // for tests and the benchmark: set the view, find an op, map (ms, lane) to canvas pixels
  window.ptZoomTo = (a, b) => { t0 = a; t1 = b; draw(); };
  window.ptXY = (t, lane) => [xOf(t), laneTop(lane) + laneH / 2];
  window.ptOpAt = opAt;

  let drag = null;
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    zoom(ev.deltaY > 0 ? 1.25 : 0.8, ev.offsetX);
  }, { passive: false });
  canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, t0, t1 }; });
  window.addEventListener("mouseup", () => { drag = null; canvas.style.cursor = "grab"; });
  canvas.addEventListener("mousemove", (ev) => {
    if (drag) {
      canvas.style.cursor = "grabbing";
      const dt = ((ev.clientX - drag.x) / plotW()) * (drag.t1 - drag.t0);
      t0 = drag.t0 - dt; t1 = drag.t1 - dt; draw(); tip.style.display = "none"; return;
    }
    const i = opAt(ev.offsetX, ev.offsetY);
    if (i < 0) { tip.style.display = "none"; return; }
    tip.textContent = describe(i);
    tip.style.left = ev.clientX + 14 + "px"; tip.style.top = ev.clientY + 12 + "px";
    tip.style.display = "block";
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  canvas.addEventListener("click", (ev) => {
    const i = opAt(ev.offsetX, ev.offsetY);
    if (i >= 0) document.getElementById("pt-detail").textContent = describe(i);
  });
  canvas.addEventListener("dblclick", () => { t0 = minT; t1 = fullEnd; draw(); });
  document.getElementById("pt-in").onclick = () => zoom(0.5);
  document.getElementById("pt-out").onclick = () => zoom(2);
  document.getElementById("pt-all").onclick = () => { t0 = minT; t1 = fullEnd; draw(); };
  window.addEventListener("keydown", (ev) => {
    if (ev.key === "+" || ev.key === "=") zoom(0.5);
    else if (ev.key === "-") zoom(2);
  });
  window.addEventListener("resize", draw);
  // legend: outcomes, fault kinds, activation, ack, witness
  const legend = document.getElementById("pt-legend");
  const item = (colour, text, border) => {
    const span = document.createElement("span");
    const sw = document.createElement("i");
    sw.className = "swatch"; sw.style.background = colour;
    if (border) sw.style.border = border;
    span.append(sw, document.createTextNode(text));
    legend.append(span);
  };
  D.outcomes.forEach((o, k) => item(D.outcome_colours[k], o));
  for (const [kind, colour] of Object.entries(D.fault_colours)) item(colour, "fault: " + kind);
  item(D.activation_colour, "DDL activation (vN)");
  item("#fff", "DDL acknowledged (▽)", "1px solid #000");
  item("#fff", "anomaly witness", "2px solid #7a0000");
  draw();
})();
