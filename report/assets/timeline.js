// timeline.html: draws the bars near the viewport from the tl-meta, tl-cols and tl-values
// blocks; see the module doc of report/src/timeline.rs for their format.
(function () {
  "use strict";
  var BLOCK = 512, COLW = 120, GUT = 96, TICK = 80, MAXPX = 8000000, MAXBARS = 4000;
  var KINDS = ["ok", "fail", "info"];
  function $(id) { return document.getElementById(id); }

  var meta = JSON.parse($("tl-meta").textContent);
  var flat = JSON.parse($("tl-cols").textContent);
  var text = $("tl-values").textContent;
  var W = meta.width, n = meta.ops, npos = meta.entries, t0 = meta.t0, t1 = meta.t1;
  var span = Math.max(1, t1 - t0), base = meta.index_base, nemesis = meta.nemesis;
  if (flat.length !== n * W) { throw new Error("timeline data: " + flat.length + " integers for " + n + " operations"); }

  // Columns of the operations, in invocation order.
  var proc = new Int32Array(n), fid = new Int32Array(n), nodeOf = new Int32Array(n), kind = new Int8Array(n);
  var tInv = new Float64Array(n), lat = new Float64Array(n), pos = new Float64Array(n), cpos = new Float64Array(n);
  var idx = null, cidx = null, byIndex = null;
  if (base === null) { idx = new Float64Array(n); cidx = new Float64Array(n); byIndex = new Map(); }
  var posOp = new Int32Array(npos).fill(-1), posTime = new Float64Array(npos);
  var t = t0, p = 0, ix = 0, i, k;
  for (i = 0, k = 0; i < n; i++, k += W) {
    proc[i] = flat[k]; fid[i] = flat[k + 1]; t += flat[k + 2]; tInv[i] = t; lat[i] = flat[k + 3];
    kind[i] = flat[k + 4]; p += flat[k + 5]; pos[i] = p; cpos[i] = flat[k + 6] < 0 ? -1 : p + flat[k + 6];
    nodeOf[i] = flat[k + 7];
    posOp[p] = i; posTime[p] = t;
    if (cpos[i] >= 0) { posOp[cpos[i]] = i; posTime[cpos[i]] = t + lat[i]; }
    if (base === null) {
      ix += flat[k + 8]; idx[i] = ix; cidx[i] = flat[k + 9] < 0 ? -1 : ix + flat[k + 9];
      byIndex.set(ix, i);
      if (cidx[i] >= 0) { byIndex.set(cidx[i], i); }
    }
  }
  flat = null;
  var lineStart = new Uint32Array(n + 1), off = 0;
  for (i = 0; i < n; i++) {
    lineStart[i] = off;
    var nl = text.indexOf("\n", off);
    off = (nl < 0 ? text.length : nl) + 1;
  }
  lineStart[n] = off;

  function indexOf(i) { return base === null ? idx[i] : pos[i] + base; }
  function cindexOf(i) { return cpos[i] < 0 ? -1 : (base === null ? cidx[i] : cpos[i] + base); }
  function lookup(index) {
    if (base === null) { var o = byIndex.get(index); return o === undefined ? -1 : o; }
    var q = index - base;
    return q >= 0 && q < npos ? posOp[q] : -1;
  }
  var cache = new Map();
  function values(i) {
    var v = cache.get(i);
    if (v !== undefined) { return v; }
    if (cache.size > 20000) { cache.clear(); }
    var line = text.slice(lineStart[i], lineStart[i + 1] - 1);
    try { v = JSON.parse(line); } catch (e) { v = [line]; }
    cache.set(i, v);
    return v;
  }

  // Layout: "order" rows (one per history entry) or "time"; columns per process or packed.
  var mode = "order", packed = meta.packed, row = 16, scale = row * Math.max(1, npos) / span;
  var maxScale = Math.max(0.01, scale * 16), selected = -1, selectedShown = false, firstShown = -1, anyShown = -1;
  var sorted = true, notice = "";
  function ppu() { return mode === "order" ? row : scale; }
  function startU(i) { return mode === "order" ? pos[i] : tInv[i] - t0; }
  function endU(i) {
    if (mode === "order") { return cpos[i] < 0 ? npos : cpos[i] + 1; }
    return cpos[i] < 0 ? span : tInv[i] + lat[i] - t0;
  }
  function colOf(i) { return packed ? meta.lanes[proc[i]] : proc[i]; }
  function ncols() { return packed ? meta.nlanes : meta.procs.length; }
  function colLabel(c) {
    if (!packed) { return meta.procs[c]; }
    return nemesis !== null && c === meta.lanes[nemesis] ? "nemesis" : "column " + c;
  }

  // Per block of BLOCK operations, the least start and greatest end, in units.
  var nb = Math.ceil(n / BLOCK), bmin = new Float64Array(nb), bmax = new Float64Array(nb);
  function buildBlocks() {
    var prev = -Infinity;
    sorted = true;
    for (var b = 0; b < nb; b++) {
      var lo = Infinity, hi = -Infinity;
      for (var i = b * BLOCK, e = Math.min(n, i + BLOCK); i < e; i++) {
        var s = startU(i), en = endU(i);
        if (s < prev) { sorted = false; }
        prev = s;
        if (s < lo) { lo = s; }
        if (en > hi) { hi = en; }
      }
      bmin[b] = lo; bmax[b] = hi;
    }
  }

  // Scrolling: beyond MAXPX the scroll range maps proportionally onto the content.
  var box = $("timeline"), canvas = $("tl-canvas"), head = $("tl-colhead-inner"), status = $("tl-status");
  var totalPx = 1, spacerPx = 1;
  function sizeCanvas() {
    totalPx = mode === "order" ? (npos + 2) * row : span * scale + 2 * row;
    spacerPx = Math.min(totalPx, MAXPX);
    canvas.style.height = spacerPx + "px";
    canvas.style.width = (GUT + ncols() * COLW + 20) + "px";
    head.style.width = canvas.style.width;
  }
  function viewH() { return box.clientHeight || 600; }
  function scaled() { return totalPx > spacerPx && spacerPx > viewH(); }
  function vtopOf(st) { return scaled() ? st * (totalPx - viewH()) / (spacerPx - viewH()) : st; }
  function stOf(vtop) {
    var st = scaled() ? vtop * (spacerPx - viewH()) / (totalPx - viewH()) : vtop;
    return Math.max(0, Math.min(st, spacerPx - viewH()));
  }

  function seconds(ns, digits) { return (ns / 1e9).toFixed(digits) + " s"; }
  function millis(ns) { return (ns / 1e6).toFixed(3) + " ms"; }
  function brief(v) {
    var s = v === undefined ? "" : JSON.stringify(v);
    if (s === undefined) { s = ""; }
    return s.length > 80 ? s.slice(0, 79) + "\u2026" : s;
  }
  function tickLabel(u) {
    if (mode === "time") {
      var digits = Math.min(9, Math.max(0, Math.ceil(-Math.log10(TICK / scale / 1e9)) + 1));
      return seconds(t0 + u, digits);
    }
    if (npos === 0) { return ""; }
    var q = Math.max(0, Math.min(npos - 1, Math.floor(u)));
    var o = posOp[q], index = base !== null ? q + base : (o < 0 ? "" : (pos[o] === q ? idx[o] : cidx[o]));
    return "#" + index + " " + seconds(posTime[q], 3);
  }

  function bar(i, c, s, k, vtop, st, vh) {
    var d = document.createElement("div"), index = indexOf(i), ci = cindexOf(i), nem = proc[i] === nemesis;
    d.className = "op " + KINDS[kind[i]] + (nem ? " nemesis" : "") + (cpos[i] < 0 ? " open" : "") + (i === selected ? " hl" : "");
    d.id = "i" + index;
    d.setAttribute("data-index", String(index));
    d.setAttribute("data-op", String(i));
    var y0 = s * k - vtop, y1 = y0 + Math.max(mode === "order" ? row - 1 : 3, (endU(i) - s) * k - 1);
    var top = Math.max(y0, -vh), bottom = Math.min(y1, 2 * vh);
    d.style.top = (top + st) + "px";
    d.style.height = Math.max(1, bottom - top) + "px";
    d.style.left = (GUT + c * COLW) + "px";
    if (nem) { d.style.background = meta.fcolours[fid[i]] || ""; }
    if (bottom - top >= 12) {
      var v = values(i);
      d.appendChild(document.createTextNode(meta.fs[fid[i]] + " " + brief(v.length > 1 ? v[1] : v[0])));
    }
    if (ci >= 0) {
      var a = document.createElement("span");
      a.id = "i" + ci;
      a.className = "anchor";
      d.appendChild(a);
    }
    return d;
  }

  var pending = false;
  function schedule() {
    if (!pending) { pending = true; window.requestAnimationFrame(render); }
  }
  function render() {
    pending = false;
    var st = box.scrollTop, sl = box.scrollLeft, vh = viewH(), vw = box.clientWidth || 800;
    var vtop = vtopOf(st), k = ppu(), u0 = (vtop - vh) / k, u1 = (vtop + 2 * vh) / k;
    var c0 = Math.floor((sl - GUT) / COLW) - 1, c1 = Math.ceil((sl + vw - GUT) / COLW) + 1;
    var frag = document.createDocumentFragment(), shown = 0, inView = 0, b, i, e;
    for (var y = Math.ceil(vtop / TICK) * TICK; y < vtop + vh; y += TICK) {
      var rule = document.createElement("div");
      rule.className = "rule";
      rule.style.top = (y - vtop + st) + "px";
      frag.appendChild(rule);
      var tick = document.createElement("div");
      tick.className = "tick";
      tick.style.top = (y - vtop + st) + "px";
      tick.style.left = sl + "px";
      tick.textContent = tickLabel(y / k);
      frag.appendChild(tick);
    }
    firstShown = -1;
    anyShown = -1;
    selectedShown = false;
    for (b = 0; b < nb; b++) {
      if (bmin[b] > u1) { if (sorted) { break; } continue; }
      if (bmax[b] < u0) { continue; }
      for (i = b * BLOCK, e = Math.min(n, i + BLOCK); i < e; i++) {
        var s = startU(i);
        if (s > u1) { if (sorted) { break; } continue; }
        if (endU(i) < u0) { continue; }
        var c = colOf(i);
        if (c < c0 || c > c1) { continue; }
        inView++;
        if (shown < MAXBARS) {
          frag.appendChild(bar(i, c, s, k, vtop, st, vh));
          shown++;
          if (firstShown < 0 && s * k >= vtop) { firstShown = i; }
          if (anyShown < 0) { anyShown = i; }
          if (i === selected) { selectedShown = true; }
        }
      }
    }
    canvas.textContent = "";
    canvas.appendChild(frag);
    var hf = document.createDocumentFragment();
    for (c = Math.max(0, c0); c <= Math.min(ncols() - 1, c1); c++) {
      var label = document.createElement("div");
      label.className = "colname";
      label.style.left = (GUT + c * COLW - sl) + "px";
      label.textContent = colLabel(c);
      hf.appendChild(label);
    }
    head.textContent = "";
    head.appendChild(hf);
    status.textContent = notice || (n === 0 ? "no operations" :
      (inView > shown ? inView + " operations in view, " + shown + " drawn: zoom in" : ""));
  }

  // The details panel: the hovered op, else the selected one.
  var panel = $("tl-panel"), table = $("tl-panel-table");
  function addRow(body, name, value, pre) {
    var tr = document.createElement("tr"), th = document.createElement("th"), td = document.createElement("td");
    th.textContent = name;
    if (pre) { var el = document.createElement("pre"); el.textContent = value; td.appendChild(el); } else { td.textContent = value; }
    tr.appendChild(th); tr.appendChild(td); body.appendChild(tr);
  }
  function pretty(v) { var s = JSON.stringify(v, null, 1); return s === undefined ? "null" : s; }
  function show(i) {
    if (i < 0) { panel.hidden = true; return; }
    var v = values(i), open = cpos[i] < 0, body = document.createElement("tbody");
    addRow(body, "index", open ? indexOf(i) + " (never completed)" : indexOf(i) + " \u2192 " + cindexOf(i));
    addRow(body, "process", meta.procs[proc[i]]);
    addRow(body, "f", meta.fs[fid[i]]);
    addRow(body, "type", open ? "info (no completion)" : KINDS[kind[i]]);
    addRow(body, "node", nodeOf[i] < 0 ? "\u2014" : meta.nodes[nodeOf[i]]);
    addRow(body, "invoked", seconds(tInv[i], 9));
    addRow(body, "completed", open ? "\u2014" : seconds(tInv[i] + lat[i], 9));
    addRow(body, "latency", open ? "\u2014" : millis(lat[i]));
    addRow(body, v.length > 1 ? "invocation value" : "value", pretty(v[0]), true);
    if (v.length > 1) { addRow(body, "completion value", pretty(v[1]), true); }
    if (v.length > 2) { addRow(body, "error", pretty(v[2]), true); }
    table.textContent = "";
    table.appendChild(body);
    $("tl-panel-title").textContent = (i === selected ? "Selected: op " : "Op ") + indexOf(i);
    panel.hidden = false;
  }
  function opOf(target) {
    var el = target && target.closest ? target.closest(".op") : null;
    return el ? Number(el.getAttribute("data-op")) : -1;
  }
  canvas.addEventListener("mouseover", function (ev) { var i = opOf(ev.target); if (i >= 0) { show(i); } });
  canvas.addEventListener("mouseleave", function () { show(selected); });
  canvas.addEventListener("click", function (ev) {
    var i = opOf(ev.target);
    if (i < 0) { return; }
    select(i, false);
    if (window.history && window.history.replaceState) { window.history.replaceState(null, "", "#i" + indexOf(i)); }
  });
  $("tl-panel-close").addEventListener("click", function () { selected = -1; notice = ""; show(-1); render(); });

  function select(i, scroll) {
    selected = i;
    notice = "";
    show(i);
    if (scroll) {
      box.scrollTop = stOf(startU(i) * ppu() - viewH() / 3);
      var x = GUT + colOf(i) * COLW, vw = box.clientWidth || 800;
      if (x < box.scrollLeft + GUT || x + COLW > box.scrollLeft + vw) {
        box.scrollLeft = Math.max(0, x - GUT - (vw - GUT) / 2);
      }
    }
    render();
  }
  function jumpToHash() {
    var m = /^#i(\d+)$/.exec(window.location.hash);
    if (!m) { return false; }
    var i = lookup(Number(m[1]));
    if (i < 0) { notice = "no operation with index " + m[1]; render(); return false; }
    select(i, true);
    return true;
  }

  // Controls; each keeps the selected op where it was on screen if it is drawn, else the
  // moment at the middle of the screen, and the column of that or the first drawn op.
  function toMode(u, from, to) {
    if (from === to || npos === 0) { return u; }
    if (to === "time") { return posTime[Math.max(0, Math.min(npos - 1, Math.floor(u)))] - t0; }
    var lo = 0, hi = npos - 1, at = t0 + u;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (posTime[mid] < at) { lo = mid + 1; } else { hi = mid; }
    }
    return lo;
  }
  function relayout(change, rebuild) {
    var from = mode, vtop = vtopOf(box.scrollTop), middle = (vtop + viewH() / 2) / ppu();
    var a = selectedShown ? selected : (firstShown >= 0 ? firstShown : anyShown), at = 0, ax = 0;
    if (a >= 0) {
      at = startU(a) * ppu() - vtop;
      ax = GUT + colOf(a) * COLW - box.scrollLeft;
    }
    change();
    if (rebuild) { buildBlocks(); }
    sizeCanvas();
    if (selectedShown) {
      box.scrollTop = stOf(startU(selected) * ppu() - at);
    } else {
      box.scrollTop = stOf(toMode(middle, from, mode) * ppu() - viewH() / 2);
    }
    if (a >= 0) { box.scrollLeft = Math.max(0, GUT + colOf(a) * COLW - ax); }
    pressed();
    render();
  }
  function pressed() {
    $("tl-order").setAttribute("aria-pressed", String(mode === "order"));
    $("tl-time").setAttribute("aria-pressed", String(mode === "time"));
    $("tl-per-process").setAttribute("aria-pressed", String(!packed));
    $("tl-packed").setAttribute("aria-pressed", String(packed));
  }
  function zoom(factor) {
    relayout(function () {
      if (mode === "order") { row = Math.max(2, Math.min(64, Math.round(row * factor))); }
      else { scale = Math.max(Math.min(scale, viewH() / span / 2), Math.min(maxScale, scale * factor)); }
    }, false);
  }
  $("tl-order").addEventListener("click", function () { relayout(function () { mode = "order"; }, true); });
  $("tl-time").addEventListener("click", function () { relayout(function () { mode = "time"; }, true); });
  $("tl-zoom-in").addEventListener("click", function () { zoom(2); });
  $("tl-zoom-out").addEventListener("click", function () { zoom(0.5); });
  $("tl-per-process").addEventListener("click", function () { relayout(function () { packed = false; }, false); });
  $("tl-packed").addEventListener("click", function () { relayout(function () { packed = true; }, false); });
  $("tl-controls").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var v = $("tl-goto").value.trim();
    if (!/^\d+$/.test(v)) { return; }
    if (window.location.hash === "#i" + v) { jumpToHash(); } else { window.location.hash = "#i" + v; }
  });
  box.addEventListener("scroll", schedule);
  window.addEventListener("resize", function () { sizeCanvas(); schedule(); });
  window.addEventListener("hashchange", jumpToHash);

  buildBlocks();
  sizeCanvas();
  pressed();
  render();
  jumpToHash();
  document.body.dataset.ops = String(n);
  if (window.tlErrors.length === 0) { document.body.dataset.scriptErrors = "0"; }
})();
