// Op timeline view: an overview canvas (latency over time, brushable) and a paginated,
// filterable op table. Data comes from the JSON embedded in the page; nothing is fetched.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("ops-data").textContent);
  var OUT_COLOURS = { ok: "#2ca02c", fail: "#d62728", info: "#ff7f0e", pending: "#7f7f7f" };
  var PAGE = 100;
  var n = D.inv.length;
  var state = { f: "", out: "", node: "", text: "", onlyWitness: false, t0: null, t1: null,
                page: 0, focus: null };
  var rows = null; // filtered op positions
  var cmpPos = null; // completion index -> op position, built on first use
  var witness = new Set(Object.keys(D.witness).map(Number));

  function $(id) { return document.getElementById(id); }
  function fill(select, names) {
    names.forEach(function (name, i) {
      var o = document.createElement("option");
      o.value = String(i); o.textContent = name; select.appendChild(o);
    });
  }
  function isWitness(i) { return witness.has(D.inv[i]) || witness.has(D.cmp[i]); }

  function applyFilter() {
    var out = [], text = state.text.toLowerCase();
    var f = state.f === "" ? -1 : +state.f, o = state.out === "" ? -1 : +state.out;
    var nd = state.node === "" ? -2 : +state.node;
    for (var i = 0; i < n; i++) {
      if (f >= 0 && D.f[i] !== f) continue;
      if (o >= 0 && D.out[i] !== o) continue;
      if (nd > -2 && D.node[i] !== nd) continue;
      var t = D.t[i] / 1000;
      if (state.t0 !== null && (t < state.t0 || t > state.t1)) continue;
      if (state.onlyWitness && !isWitness(i)) continue;
      if (text && D.sum[i].toLowerCase().indexOf(text) < 0 &&
          String(D.proc[i]) !== text && String(D.inv[i]) !== text) continue;
      out.push(i);
    }
    rows = out;
  }

  function fmt(x, digits) { return x === null || x === undefined ? "" : x.toFixed(digits); }

  function renderTable() {
    var body = $("tl-body");
    var pages = Math.max(1, Math.ceil(rows.length / PAGE));
    state.page = Math.min(Math.max(0, state.page), pages - 1);
    var start = state.page * PAGE, html = [];
    for (var k = start; k < Math.min(rows.length, start + PAGE); k++) {
      var i = rows[k], out = D.outcomes[D.out[i]];
      var cls = out + (isWitness(i) ? " witness" : "") + (state.focus === i ? " focus" : "");
      html.push('<tr data-pos="' + i + '" id="op-' + D.inv[i] + '" class="' + cls + '">' +
        '<td class="num">' + D.inv[i] + (D.cmp[i] >= 0 ? "&rarr;" + D.cmp[i] : "") + "</td>" +
        '<td class="num">' + fmt(D.t[i] / 1000, 3) + "</td>" +
        '<td class="num">' + D.proc[i] + "</td>" +
        "<td>" + esc(D.f_names[D.f[i]]) + "</td>" +
        "<td>" + (D.node[i] >= 0 ? esc(D.node_names[D.node[i]]) : "") + "</td>" +
        '<td class="out">' + out + "</td>" +
        "<td>" + (D.err[i] >= 0 ? esc(D.error_names[D.err[i]]) : "") + "</td>" +
        '<td class="num">' + fmt(D.lat[i], 1) + "</td>" +
        "<td><code>" + esc(D.sum[i]) + "</code></td></tr>");
    }
    body.innerHTML = html.join("");
    $("tl-page").textContent = "page " + (state.page + 1) + " / " + pages + " \u00b7 " +
      rows.length + " of " + n + " ops shown" +
      (D.sampled ? " (the history has " + D.total_ops + " ops; the page embeds every " +
       "failed, unknown and witness op and a uniform sample of the rest)" : "");
  }

  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }

  // Overview canvas: log latency against time, one pixel column per time slice.
  var canvas = $("tl-canvas"), ctx = canvas.getContext("2d"), W = 0, H = 0;
  var maxT = Math.max(D.end_s, 1), minL = 0.1, maxL = 1;
  for (var j = 0; j < n; j++) { if (D.lat[j] > maxL) maxL = D.lat[j]; }
  function xOf(t) { return 40 + (W - 50) * (t / maxT); }
  function yOf(l) {
    var a = Math.log10(minL), b = Math.log10(maxL * 1.2);
    return H - 18 - (H - 28) * ((Math.log10(Math.max(l, minL)) - a) / (b - a));
  }
  function drawCanvas() {
    var ratio = window.devicePixelRatio || 1;
    W = canvas.clientWidth; H = canvas.clientHeight;
    canvas.width = W * ratio; canvas.height = H * ratio;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, W, H);
    D.nemesis.forEach(function (w) {
      ctx.fillStyle = D.nemesis_colours[w.kind] || "#7f7f7f";
      ctx.globalAlpha = 0.15;
      ctx.fillRect(xOf(w.start), 0, Math.max(2, xOf(w.end) - xOf(w.start)), H - 18);
    });
    ctx.globalAlpha = 1;
    ctx.font = "11px sans-serif"; ctx.textAlign = "right";
    Object.keys(D.nemesis_colours).sort().forEach(function (kind, k) {
      ctx.fillStyle = D.nemesis_colours[kind];
      ctx.fillText("\u25a0 nemesis: " + kind, W - 6, 14 + 13 * k);
    });
    ctx.textAlign = "left";
    if (state.t0 !== null) {
      ctx.fillStyle = "rgba(11,87,208,0.12)";
      ctx.fillRect(xOf(state.t0), 0, xOf(state.t1) - xOf(state.t0), H - 18);
    }
    ctx.strokeStyle = "#6a3d9a"; ctx.setLineDash([2, 3]);
    D.activations.forEach(function (a) {
      if (a.t === null) return;
      ctx.beginPath(); ctx.moveTo(xOf(a.t), 0); ctx.lineTo(xOf(a.t), H - 18); ctx.stroke();
    });
    ctx.setLineDash([]);
    var order = [0, 2, 3, 1]; // draw ok first so failures stay visible on top
    order.forEach(function (code) {
      ctx.fillStyle = OUT_COLOURS[D.outcomes[code]];
      for (var i = 0; i < n; i++) {
        if (D.out[i] !== code) continue;
        ctx.fillRect(xOf(D.t[i] / 1000), yOf(D.lat[i]) - 1, 2, 2);
      }
    });
    ctx.fillStyle = "#b30000";
    Object.keys(D.witness_time).forEach(function (k) {
      var x = xOf(D.witness_time[k]);
      ctx.beginPath(); ctx.moveTo(x - 4, 0); ctx.lineTo(x + 4, 0); ctx.lineTo(x, 7); ctx.fill();
    });
    ctx.fillStyle = "#444"; ctx.font = "11px sans-serif";
    for (var s = 0; s <= 10; s++) {
      var t = maxT * s / 10;
      ctx.fillText(t.toFixed(maxT < 20 ? 1 : 0) + "s", xOf(t) - 8, H - 4);
    }
    ctx.fillText(maxL.toFixed(0) + " ms", 2, 12);
    ctx.fillText(minL + " ms", 2, H - 20);
  }
  function tOf(x) { return Math.min(maxT, Math.max(0, (x - 40) / (W - 50) * maxT)); }
  var drag = null;
  canvas.addEventListener("mousedown", function (e) { drag = e.offsetX; });
  canvas.addEventListener("mouseup", function (e) {
    if (drag === null) return;
    var a = tOf(Math.min(drag, e.offsetX)), b = tOf(Math.max(drag, e.offsetX));
    drag = null;
    if (b - a < maxT / 500) { a = Math.max(0, a - maxT / 100); b = Math.min(maxT, b + maxT / 100); }
    state.t0 = a; state.t1 = b; state.page = 0;
    $("tl-range").textContent = a.toFixed(2) + "s \u2013 " + b.toFixed(2) + "s";
    refresh();
  });
  canvas.addEventListener("dblclick", function () { clearRange(); refresh(); });
  function clearRange() { state.t0 = state.t1 = null; $("tl-range").textContent = "all"; }

  function refresh() { applyFilter(); renderTable(); drawCanvas(); }

  function showDetail(idx, pos) {
    var ev = D.witness[String(idx)];
    var parts = [];
    if (pos !== null && pos !== undefined) {
      parts.push("op " + D.inv[pos] + (D.cmp[pos] >= 0 ? " \u2192 " + D.cmp[pos] : "") +
        ": process " + D.proc[pos] + ", " + D.f_names[D.f[pos]] + ", " +
        D.outcomes[D.out[pos]] + ", " + fmt(D.lat[pos], 1) + " ms");
      [D.inv[pos], D.cmp[pos]].forEach(function (k) {
        var e = D.witness[String(k)];
        if (e) parts.push(JSON.stringify(e, null, 1));
      });
    } else if (ev) {
      parts.push(JSON.stringify(ev, null, 1));
    }
    if (!parts.length) parts.push("event " + idx + " (full event in history.jsonl)");
    $("tl-detail").textContent = parts.join("\n");
  }

  // Jump to the op of history event idx (its invoke or its completion).
  function showEvent(idx) {
    var pos = -1, lo = 0, hi = n - 1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (D.inv[mid] === idx) { pos = mid; break; }
      if (D.inv[mid] < idx) lo = mid + 1; else hi = mid - 1;
    }
    if (pos < 0) {
      if (cmpPos === null) {
        cmpPos = new Map();
        for (var i = 0; i < n; i++) if (D.cmp[i] >= 0) cmpPos.set(D.cmp[i], i);
      }
      pos = cmpPos.has(idx) ? cmpPos.get(idx) : -1;
    }
    if (pos < 0) {
      showDetail(idx, null);
      var nem = $("nem-" + idx);
      if (nem) nem.scrollIntoView({ block: "center" });
      else $("timeline").scrollIntoView();
      return;
    }
    state.f = state.out = state.node = state.text = ""; state.onlyWitness = false;
    ["tl-f", "tl-out", "tl-node", "tl-text"].forEach(function (id) { $(id).value = ""; });
    $("tl-witness").checked = false;
    clearRange();
    state.focus = pos;
    applyFilter();
    state.page = Math.floor(rows.indexOf(pos) / PAGE);
    renderTable(); drawCanvas();
    showDetail(idx, pos);
    var row = document.querySelector('#tl-body tr[data-pos="' + pos + '"]');
    if (row) row.scrollIntoView({ block: "center" });
  }
  window.showEvent = showEvent;

  fill($("tl-f"), D.f_names); fill($("tl-out"), D.outcomes); fill($("tl-node"), D.node_names);
  $("tl-f").addEventListener("change", function (e) { state.f = e.target.value; state.page = 0; refresh(); });
  $("tl-out").addEventListener("change", function (e) { state.out = e.target.value; state.page = 0; refresh(); });
  $("tl-node").addEventListener("change", function (e) { state.node = e.target.value; state.page = 0; refresh(); });
  $("tl-witness").addEventListener("change", function (e) { state.onlyWitness = e.target.checked; state.page = 0; refresh(); });
  var timer = null;
  $("tl-text").addEventListener("input", function (e) {
    clearTimeout(timer);
    timer = setTimeout(function () { state.text = e.target.value.trim(); state.page = 0; refresh(); }, 200);
  });
  $("tl-prev").addEventListener("click", function () { state.page--; renderTable(); });
  $("tl-next").addEventListener("click", function () { state.page++; renderTable(); });
  $("tl-body").addEventListener("click", function (e) {
    var tr = e.target.closest("tr");
    if (!tr) return;
    var pos = +tr.dataset.pos;
    state.focus = pos; renderTable(); showDetail(D.inv[pos], pos);
  });
  document.addEventListener("click", function (e) {
    var a = e.target.closest("a.ev");
    if (!a) return;
    e.preventDefault();
    history.replaceState(null, "", "#ev-" + a.dataset.ev);
    showEvent(+a.dataset.ev);
  });
  window.addEventListener("resize", drawCanvas);
  function fromHash() {
    var m = /^#ev-(\d+)$/.exec(location.hash);
    if (m) showEvent(+m[1]);
  }
  window.addEventListener("hashchange", fromHash);
  refresh();
  fromHash();
  $("timeline").dataset.ready = "1";
})();
