// Browser side of attnlib.viz.widgets (AttentionHeatmap, AttentionExplorer).
// Vanilla ES module, no build step, no dependencies. Every piece of state lives in the
// closure of one render() call and every element hangs under `el`, so any number of
// widgets (or views of one widget) work side by side on a page. The same code runs in the
// page written by to_html(), with a kernel-free model.
//
// Model fields read here (made by attnlib/viz/state.py, page_model):
//   _constants    the numbers Python and this file share (thumb, linesMaxTokens, levels, q8Top, q8Masked,
//                 labelChars, scales, views): defined once in state.py, never copied here
//   _weights      float32 little-endian bytes, C order, shape _shape
//   _mask         uint8 per cell (1 = may attend), or empty (nothing masked)
//   _shape        [layers, heads, Lq, Lk]
//   _map_lo, _map_hi  per map (layer-major): smallest and largest unmasked value
//   _map_rest     per map: largest |value| outside its sink column and its one-key rows (the top of the
//                 scale with clip_sink)
//   _palette      levels x RGB bytes (the colormap); _mask_rgb: the colour of masked cells
//   _query_tokens, _key_tokens, _layer_names, _kind ("heatmap" | "explorer"), title, raw_scores
//   synced: selected (query index | null), selected_key (key index | null),
//           scale ("layer" | "map" | "model" | "fixed"), vmin, vmax, clip_sink, view ("map" | "lines");
//           explorer: layer, head
//   big explorers (_lazy): _weights and _mask are empty; _thumbs (float32 grid thumbnails, NaN = masked)
//           and _exact (float32 map _exact_at = [layer, head], NaN = masked) sent by the kernel when layer
//           or head changes. A kernel-free page of one also has _weights_u8 (every map, 8 bits: 0..q8Top
//           from the map's _map_lo to _map_hi, q8Masked = masked).

const MAX_SIDE = 512; // CSS px of the longer side; up to 512 tokens a cell is >= 1 px (more: shrunk, point via the token strips)
const LABEL_MIN_CELL = 9; // draw token labels beside the map when cells are at least this big
const TALL_GRID = 12, TALL_THUMB = 36; // more layers than this: thumbnails of 36 CSS px (else _constants.thumb)
const BAR_W = 180, BAR_H = 10; // colour bar
const ROW_H = 18, LINES_W = 180; // lines view: px per token row, px between the two columns

function h(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

function bytesOf(v) {
  if (v instanceof DataView) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (typeof v === "string") return Uint8Array.from(atob(v), (c) => c.charCodeAt(0)); // base64
  if (v == null) return new Uint8Array(0);
  throw new Error("attnlib: cannot read binary trait of type " + typeof v);
}

function floatsOf(v) {
  const b = bytesOf(v);
  if (b.byteOffset % 4 === 0) return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  return new Float32Array(b.slice().buffer); // unaligned view: copy once
}

const fmt = (v) => (Math.abs(v) >= 1e4 ? v.toExponential(2) : v.toFixed(3));
const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

function render({ model, el }) {
  const t0 = performance.now();
  const K = model.get("_constants");
  if (!K || !K.scales) throw new Error("attnlib: the model has no _constants; widget and attention.js are from different versions");
  const TOP = K.levels - 1; // the palette's last colour
  const [nL, nH, Lq, Lk] = model.get("_shape");
  const data = floatsOf(model.get("_weights"));
  const maskBytes = bytesOf(model.get("_mask"));
  const masked = maskBytes.length > 0 ? (p) => maskBytes[p] === 0 : () => false;
  const pal = bytesOf(model.get("_palette"));
  const maskRGB = model.get("_mask_rgb");
  const mapLo = model.get("_map_lo"), mapHi = model.get("_map_hi"), mapRest = model.get("_map_rest");
  const qTok = model.get("_query_tokens");
  const kTok = model.get("_key_tokens");
  const raw = model.get("raw_scores");
  const explorer = model.get("_kind") === "explorer";
  const layerNames = model.get("_layer_names") || [];
  const layer = () => (explorer ? model.get("layer") : 0);
  const head = () => (explorer ? model.get("head") : 0);
  const selRow = () => model.get("selected") ?? null;
  const selCol = () => model.get("selected_key") ?? null;
  const view = { hover: null, hoverCol: null, qShaded: false, kShaded: [], qShadedList: [], lastB: null, lastA: null, lastSel: null, lastSelK: null }; // local, never synced: no kernel round trip
  const mapStart = (l, hd) => (l * nH + hd) * Lq * Lk;
  const lazy = !!model.get("_lazy"); // big explorer: only the map on display is here, exact, sent by the kernel
  const q8 = bytesOf(model.get("_weights_u8")); // kernel-free page of a big explorer: every map in 8 bits
  const thumbData = lazy ? floatsOf(model.get("_thumbs")) : null;
  const exact = new Map(), approx = new Set(); // lazy: "l:h" -> Float32Array(Lq * Lk), NaN = masked
  function valsOf(l, hd) { // one map's values, or null while the kernel is still sending it
    if (!lazy) return data.subarray(mapStart(l, hd), mapStart(l, hd) + Lq * Lk);
    const key = l + ":" + hd;
    if (!exact.has(key) && q8.length) {
      const m = l * nH + hd, lo = mapLo[m], span = (mapHi[m] - lo) / K.q8Top, v = new Float32Array(Lq * Lk);
      for (let p = 0, s = m * Lq * Lk; p < Lq * Lk; p++) { const q = q8[s + p]; v[p] = q === K.q8Masked ? NaN : lo + q * span; }
      exact.set(key, v); approx.add(key);
    }
    return exact.get(key) || null;
  }
  function takeExact() { // the kernel sent the exact map _exact_at
    const [l, hd] = model.get("_exact_at"), key = l + ":" + hd;
    exact.set(key, new Float32Array(floatsOf(model.get("_exact")))); approx.delete(key); images.delete(key);
  }
  const isMaskedAt = (l, hd, vals, p) => (lazy ? Number.isNaN(vals[p]) : masked(mapStart(l, hd) + p));
  let cur = null; // the values of the map on display (null: not here yet)
  const weight = (i, j) => cur[i * Lk + j];
  const isMasked = (i, j) => isMaskedAt(layer(), head(), cur, i * Lk + j);
  const lname = (l) => layerNames[l] || "layer " + l;

  // ---- colour: the range of a map on the current scale (the same rule as _range in Python) ----
  function rangeOf(l, hd) {
    const s = model.get("scale");
    if (s === "fixed") return [model.get("vmin"), model.get("vmax")];
    const from = s === "map" ? l * nH + hd : s === "layer" ? l * nH : 0;
    const to = s === "map" ? from + 1 : s === "layer" ? from + nH : nL * nH;
    if (model.get("clip_sink")) { // the top leaves out each map's sink column (its cells saturate)
      let top = 0;
      for (let m = from; m < to; m++) top = Math.max(top, mapRest[m]);
      top = top || 1;
      return raw ? [-top, top] : [0, top];
    }
    let lo = Infinity, hi = -Infinity;
    for (let m = from; m < to; m++) { lo = Math.min(lo, mapLo[m]); hi = Math.max(hi, mapHi[m]); }
    if (raw) { const lim = Math.max(Math.abs(lo), Math.abs(hi)) || 1; return [-lim, lim]; }
    return [0, hi > 0 ? hi : 1];
  }
  function colourIndex(v, [lo, hi]) {
    const k = Math.round(((v - lo) / (hi - lo)) * TOP);
    return k < 0 ? 0 : k > TOP ? TOP : k;
  }
  const rgb = (k) => `rgb(${pal[3 * k]},${pal[3 * k + 1]},${pal[3 * k + 2]})`;
  const maskCss = `rgb(${maskRGB[0]},${maskRGB[1]},${maskRGB[2]})`;
  function inkFor(k) { // black text on light colours, white on dark ones
    const lum = 0.299 * pal[3 * k] + 0.587 * pal[3 * k + 1] + 0.114 * pal[3 * k + 2];
    return lum > 140 ? "#000" : "#fff";
  }

  // One pixel per cell, painted once per (layer, head, scale) into an off-screen canvas.
  const images = new Map();
  function imageOf(l, hd) {
    const key = l + ":" + hd;
    if (!images.has(key)) {
      const c = document.createElement("canvas");
      c.width = Lk; c.height = Lq;
      const cx = c.getContext("2d");
      const img = cx.createImageData(Lk, Lq);
      const vals = valsOf(l, hd);
      if (vals === null) return null;
      const px = img.data, r = rangeOf(l, hd);
      for (let p = 0; p < Lq * Lk; p++) {
        if (isMaskedAt(l, hd, vals, p)) {
          px[4 * p] = maskRGB[0]; px[4 * p + 1] = maskRGB[1]; px[4 * p + 2] = maskRGB[2];
        } else {
          const k = colourIndex(vals[p], r);
          px[4 * p] = pal[3 * k]; px[4 * p + 1] = pal[3 * k + 1]; px[4 * p + 2] = pal[3 * k + 2];
        }
        px[4 * p + 3] = 255;
      }
      cx.putImageData(img, 0, 0);
      images.set(key, c);
    }
    return images.get(key);
  }

  // A grid thumbnail: each pixel is the strongest cell of its block (so peaks never vanish), on the scale.
  const thumbPx = nL > TALL_GRID ? TALL_THUMB : K.thumb; // CSS px of a thumbnail on the page
  const thumbSide = lazy ? K.thumb : Math.min(K.thumb, thumbPx); // cells a side of its data (the kernel's: K.thumb)
  const thumbImages = new Map();
  function thumbOf(l, hd) {
    const key = l + ":" + hd;
    if (!thumbImages.has(key)) {
      const tw = Math.min(thumbSide, Lk), th = Math.min(thumbSide, Lq);
      const c = document.createElement("canvas");
      c.width = tw; c.height = th;
      const cx = c.getContext("2d"), img = cx.createImageData(tw, th), px = img.data;
      const r = rangeOf(l, hd), vals = lazy ? null : valsOf(l, hd), t0 = (l * nH + hd) * th * tw;
      for (let y = 0; y < th; y++) {
        const i0 = Math.floor((y * Lq) / th), i1 = Math.max(i0 + 1, Math.floor(((y + 1) * Lq) / th));
        for (let x = 0; x < tw; x++) {
          const j0 = Math.floor((x * Lk) / tw), j1 = Math.max(j0 + 1, Math.floor(((x + 1) * Lk) / tw));
          let best = NaN;
          if (lazy) best = thumbData[t0 + y * tw + x]; // the kernel computed the same blocks
          else {
            for (let i = i0; i < i1; i++) {
              for (let j = j0; j < j1; j++) {
                const p = i * Lk + j;
                if (!isMaskedAt(l, hd, vals, p) && !(Math.abs(vals[p]) <= Math.abs(best))) best = vals[p];
              }
            }
          }
          const q = 4 * (y * tw + x);
          if (Number.isNaN(best)) { px[q] = maskRGB[0]; px[q + 1] = maskRGB[1]; px[q + 2] = maskRGB[2]; }
          else { const k = colourIndex(best, r); px[q] = pal[3 * k]; px[q + 1] = pal[3 * k + 1]; px[q + 2] = pal[3 * k + 2]; }
          px[q + 3] = 255;
        }
      }
      cx.putImageData(img, 0, 0);
      thumbImages.set(key, c);
    }
    return thumbImages.get(key);
  }

  // ---- DOM ----
  const root = h("div", {
    class: "attnlib-attn", "data-testid": "attn-root", "data-kind": explorer ? "explorer" : "heatmap", tabindex: "0",
    role: "group", "aria-label": `attention map, ${Lq} queries by ${Lk} keys. Arrow keys move the query (up, down) `
      + "and key (left, right) cursor, Enter pins, Escape unpins.",
  });
  const header = h("div", { class: "attnlib-header" });
  const titleEl = h("span", { class: "attnlib-title", "data-testid": "title" }, model.get("title") || "");
  header.append(titleEl);
  const pin = h("button", { class: "attnlib-pin", "data-testid": "pinned-marker", type: "button", title: "click to unpin" });
  pin.hidden = true;
  header.append(pin);
  root.append(header);

  let layerSel = null, headSel = null, scaleSel = null, grid = null, gridMark = null;
  const thumbs = []; // [l][hd] -> canvas
  const controls = h("div", { class: "attnlib-controls" });
  const labelled = (text, node) => { const lab = h("label", {}, text + " "); lab.append(node); return lab; };
  scaleSel = h("select", { "data-testid": "scale-select", "aria-label": "colour scale" });
  const scaleNames = { layer: "one per layer", map: "one per map", model: "whole model", fixed: "fixed" };
  for (const v of K.scales) scaleSel.append(h("option", { value: v }, scaleNames[v] || v));
  const sinkBox = h("input", { type: "checkbox", "data-testid": "sink-toggle" });
  const sinkLabel = h("label", { title: "The top of the colour scale leaves out each map's sink column (the key that takes "
    + "the most weight, e.g. a decoder's first token): the sink's cells saturate, every other cell gets its colour back." });
  sinkLabel.append(sinkBox, " clip the sink");
  if (explorer) {
    layerSel = h("select", { "data-testid": "layer-select", "aria-label": "layer" });
    for (let l = 0; l < nL; l++) layerSel.append(h("option", { value: String(l) }, lname(l)));
    headSel = h("select", { "data-testid": "head-select", "aria-label": "head" });
    for (let hd = 0; hd < nH; hd++) headSel.append(h("option", { value: String(hd) }, "head " + hd));
    controls.append(labelled("layer", layerSel), labelled("head", headSel));
    grid = h("div", { class: "attnlib-grid", "data-testid": "head-grid", role: "grid", "aria-label": "every layer and head" });
    grid.style.gridTemplateColumns = `auto repeat(${nH}, ${thumbPx + 6}px)`;
    grid.style.setProperty("--attnlib-thumb", thumbPx + "px");
    grid.append(h("span", { class: "attnlib-gridtop" }));
    for (let hd = 0; hd < nH; hd++) grid.append(h("span", { class: "attnlib-gridhead attnlib-gridtop" }, "head " + hd));
    for (let l = 0; l < nL; l++) {
      grid.append(h("span", { class: "attnlib-gridhead" }, lname(l)));
      thumbs.push([]);
      for (let hd = 0; hd < nH; hd++) {
        const b = h("button", { class: "attnlib-thumb", type: "button", "data-testid": `thumb-${l}-${hd}`,
          "data-layer": String(l), "data-head": String(hd), "aria-label": `open ${lname(l)}, head ${hd}` });
        const c = h("canvas", { width: String(thumbPx), height: String(thumbPx) });
        b.append(c);
        grid.append(b);
        thumbs[l].push([c]);
      }
    }
    gridMark = h("canvas", { class: "attnlib-gridmark", "aria-hidden": "true" }); // every outline, one canvas
    grid.append(gridMark);
  }
  controls.append(labelled("colour scale", scaleSel), sinkLabel);
  const linesOK = Math.max(Lq, Lk) <= K.linesMaxTokens;
  const viewSel = h("select", { "data-testid": "view-select", "aria-label": "view" });
  const viewNames = { map: "matrix", lines: linesOK ? "lines" : `lines (at most ${K.linesMaxTokens} tokens)` };
  for (const v of K.views) {
    const opt = h("option", { value: v }, viewNames[v] || v);
    opt.disabled = v === "lines" && !linesOK;
    viewSel.append(opt);
  }
  controls.append(labelled("view", viewSel));
  root.append(controls);

  root.append(h("div", { class: "attnlib-caption" }, "queries (rows): hover to see where each looks; click to pin"));
  const qStrip = h("div", { class: "attnlib-tokens", "data-testid": "query-tokens" });
  // Built as one escaped HTML string: one parse instead of a createElement per token.
  qStrip.innerHTML = qTok.map((t, i) => `<span class="attnlib-tok attnlib-q" data-testid="query-token-${i}" data-i="${i}" `
    + `tabindex="-1" role="button" aria-pressed="false" aria-label="query ${esc(t)}">${esc(t)}</span>`).join("");
  const qChips = Array.from(qStrip.children);
  root.append(qStrip, h("div", { class: "attnlib-caption" }, "keys (columns): hover to see who attends here; click to pin"));
  const kStrip = h("div", { class: "attnlib-tokens", "data-testid": "key-tokens" });
  kStrip.innerHTML = kTok.map((t, j) => `<span class="attnlib-tok attnlib-k" data-testid="key-token-${j}" data-j="${j}" `
    + `tabindex="-1" role="button" aria-pressed="false" aria-label="key ${esc(t)}">${esc(t)}</span>`).join("");
  const kChips = Array.from(kStrip.children);
  const readout = h("div", { class: "attnlib-readout", "data-testid": "readout", "aria-live": "polite" });
  root.append(kStrip, readout);

  // ---- the matrix: a canvas for cells and labels, an overlay canvas for the highlight ----
  const maxL = Math.max(Lq, Lk);
  const cell = maxL <= MAX_SIDE ? Math.min(28, Math.floor(MAX_SIDE / maxL)) : MAX_SIDE / maxL;
  const labels = cell >= LABEL_MIN_CELL;
  const canvas = h("canvas", { class: "attnlib-map", "data-testid": "heatmap-canvas", role: "img",
    "aria-label": "attention map: rows are queries, columns are keys" });
  const overlay = h("canvas", { class: "attnlib-overlay", "data-testid": "heatmap-overlay" });
  const ctx = canvas.getContext("2d"), octx = overlay.getContext("2d");
  const font = "11px monospace";
  ctx.font = font;
  const clip = (s) => (s.length > K.labelChars ? s.slice(0, K.labelChars - 1) + "\u2026" : s);
  const widest = (toks) => Math.max(...toks.map((t) => ctx.measureText(clip(t)).width));
  const left = labels ? Math.min(110, Math.ceil(widest(qTok)) + 8) : 0;
  const top = labels ? Math.min(110, Math.ceil(widest(kTok)) + 8) : 0;
  const W = left + Lk * cell, H = top + Lq * cell;
  const dpr = window.devicePixelRatio || 1;
  for (const c of [canvas, overlay]) {
    c.width = Math.ceil(W * dpr); c.height = Math.ceil(H * dpr);
    c.style.width = W + "px"; c.style.height = H + "px";
    c.getContext("2d").setTransform(dpr, 0, 0, dpr, 0, 0);
  }
  Object.assign(canvas.dataset, { left: String(left), top: String(top), cell: String(cell) }); // geometry, for tests
  const mapBox = h("div", { class: "attnlib-mapbox" });
  mapBox.style.width = W + "px"; mapBox.style.height = H + "px";
  mapBox.append(canvas, overlay);
  const bar = h("div", { class: "attnlib-colorbar", "data-testid": "colorbar" });
  const barCanvas = h("canvas", { width: String(BAR_W), height: String(BAR_H), "aria-hidden": "true" });
  const barTicks = h("div", { class: "attnlib-ticks" });
  const maskKey = h("span", { class: "attnlib-maskkey", "data-testid": "mask-key" });
  maskKey.innerHTML = `<i style="background:${maskCss}"></i>masked`;
  maskKey.hidden = maskBytes.length === 0;
  const barBox = h("div", {}); barBox.append(barCanvas, barTicks);
  bar.append(barBox, maskKey);
  const legend = h("div", { class: "attnlib-legend", "data-testid": "legend" });

  // ---- the lines view (bertviz's head view): queries left, keys right, one line per pair ----
  const linesBox = h("div", { class: "attnlib-lines", "data-testid": "lines-view" });
  const lqCol = h("div", { class: "attnlib-lcol attnlib-lq", "data-testid": "lines-queries" });
  const lkCol = h("div", { class: "attnlib-lcol", "data-testid": "lines-keys" });
  const lcanvas = h("canvas", { class: "attnlib-lcanvas", "data-testid": "lines-canvas", role: "img",
    "aria-label": "attention as lines from queries (left) to keys (right)" });
  const LH = Math.max(Lq, Lk) * ROW_H;
  if (linesOK) {
    const tok = (t, cls, id, attr, i) => `<div class="attnlib-ltok ${cls}" data-testid="${id}-${i}" data-${attr}="${i}" `
      + `role="button" aria-label="${cls === "attnlib-q" ? "query" : "key"} ${esc(t)}">${esc(t)}</div>`;
    lqCol.innerHTML = qTok.map((t, i) => tok(t, "attnlib-q", "lines-query", "i", i)).join("");
    lkCol.innerHTML = kTok.map((t, j) => tok(t, "attnlib-k", "lines-key", "j", j)).join("");
    lcanvas.width = Math.ceil(LINES_W * dpr); lcanvas.height = Math.ceil(LH * dpr);
    lcanvas.style.width = LINES_W + "px"; lcanvas.style.height = LH + "px";
    lcanvas.getContext("2d").setTransform(dpr, 0, 0, dpr, 0, 0);
    Object.assign(lcanvas.dataset, { rowH: String(ROW_H), width: String(LINES_W) }); // geometry, for tests
  }
  const lqChips = Array.from(lqCol.children), lkChips = Array.from(lkCol.children);
  linesBox.append(lqCol, lcanvas, lkCol);
  linesBox.hidden = true;
  if (explorer) {
    const body = h("div", { class: "attnlib-body" });
    const side = h("div", {}); side.append(mapBox, linesBox, bar, legend);
    body.append(side, grid);
    root.append(body);
  } else {
    root.append(mapBox, linesBox, bar, legend);
  }
  el.append(root);

  const scaleText = () => ({ layer: "one scale per layer", map: "one scale per map", model: "one scale for the whole model",
    fixed: "fixed scale" })[model.get("scale")];

  function drawBar() {
    const [lo, hi] = rangeOf(layer(), head());
    const b = barCanvas.getContext("2d");
    for (let x = 0; x < BAR_W; x++) { b.fillStyle = rgb(Math.round((x / (BAR_W - 1)) * TOP)); b.fillRect(x, 0, 1, BAR_H); }
    const atTop = model.get("clip_sink") ? "\u2265 " : ""; // clipped: the top colour also holds everything above
    barTicks.innerHTML = [lo, (lo + hi) / 2, hi].map((v, k) => `<span>${k === 2 ? atTop : ""}${fmt(v)}</span>`).join("");
    bar.dataset.vmin = fmt(lo); bar.dataset.vmax = fmt(hi);
  }

  const shownView = () => (model.get("view") === "lines" && linesOK ? "lines" : "map");
  function drawLines() { // every line of the map on display; only the lit query's (or key's) when one is lit
    if (shownView() !== "lines" || cur === null) return;
    const c = lcanvas.getContext("2d");
    c.clearRect(0, 0, LINES_W, LH);
    const a = activeRow(), b = activeCol(), r = rangeOf(layer(), head()), lim = Math.max(Math.abs(r[0]), Math.abs(r[1]));
    for (let i = 0; i < Lq; i++) {
      if (a !== null && i !== a) continue;
      for (let j = 0; j < Lk; j++) {
        if (a === null && b !== null && j !== b) continue;
        const p = i * Lk + j;
        if (isMaskedAt(layer(), head(), cur, p)) continue;
        const v = cur[p], t = raw ? Math.abs(v) / lim : Math.max(0, Math.min(1, (v - r[0]) / (r[1] - r[0])));
        c.globalAlpha = a === null && b === null ? 0.6 * t : t;
        c.strokeStyle = rgb(colourIndex(v, r)); c.lineWidth = 0.5 + 2.5 * t;
        c.beginPath(); c.moveTo(0, (i + 0.5) * ROW_H); c.lineTo(LINES_W, (j + 0.5) * ROW_H); c.stroke();
      }
    }
    c.globalAlpha = 1;
  }

  function drawMap() {
    const l = layer(), hd = head();
    ctx.clearRect(0, 0, W, H);
    ctx.imageSmoothingEnabled = false;
    const img = imageOf(l, hd);
    if (img) ctx.drawImage(img, left, top, Lk * cell, Lq * cell);
    else { ctx.imageSmoothingEnabled = true; ctx.drawImage(thumbOf(l, hd), left, top, Lk * cell, Lq * cell); } // until the exact map arrives
    root.dataset.loading = img ? "" : "1";
    root.dataset.exact = img && approx.has(l + ":" + hd) ? "0" : "1";
    if (labels) {
      ctx.font = font;
      ctx.fillStyle = getComputedStyle(root).color || "#888";
      ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      qTok.forEach((t, i) => ctx.fillText(clip(t), left - 4, top + (i + 0.5) * cell));
      ctx.textAlign = "left";
      kTok.forEach((t, j) => {
        ctx.save(); ctx.translate(left + (j + 0.5) * cell, top - 4); ctx.rotate(-Math.PI / 2);
        ctx.fillText(clip(t), 0, 0); ctx.restore();
      });
    }
    drawBar();
    legend.textContent = (raw ? "raw scores, diverging around 0" : "attention weight") + ` \u00b7 ${scaleText()}`
      + (model.get("clip_sink") ? " \u00b7 sink clipped (the top ignores each map's heaviest key; its cells saturate)" : "")
      + (shownView() === "lines" ? " \u00b7 left = queries, right = keys, line colour and width = weight"
        : " \u00b7 rows = queries, columns = keys") + (explorer ? ` \u00b7 ${lname(l)}, head ${hd}` : "")
      + (img ? "" : " \u00b7 loading the exact map from the kernel\u2026")
      + (img && approx.has(l + ":" + hd) ? " \u00b7 values \u2248 (8-bit copy; exact in the notebook)" : "");
    root.dataset.layer = String(l); root.dataset.head = String(hd); root.dataset.scale = model.get("scale");
    root.dataset.clipSink = model.get("clip_sink") ? "1" : "";
  }

  const activeRow = () => (view.hover !== null ? view.hover : selRow());
  const activeCol = () => (view.hoverCol !== null ? view.hoverCol : selCol());

  function drawThumbBases() { // once, and again when the scale changes
    for (let l = 0; l < nL; l++) {
      for (let hd = 0; hd < nH; hd++) {
        const t = thumbs[l][hd][0].getContext("2d"), img = thumbOf(l, hd);
        t.imageSmoothingEnabled = img.width > thumbPx || img.height > thumbPx; // a kernel's thumbnail, shrunk
        t.drawImage(img, 0, 0, thumbPx, thumbPx);
      }
    }
  }
  let marked = "", current = "", scrolledTo = -1;
  function drawThumbs() { // cheap: the outlines of every thumbnail, on one canvas over the grid
    const a = activeRow(), b = activeCol(), key = `${a}:${b}`;
    const { gw, gh, at } = geom.grid; // read before update() wrote anything (see measure)
    if (key !== marked && gw > 0) { // gw = 0: not on the page yet, draw on a later update
      marked = key;
      if (gridMark.width !== Math.ceil(gw * dpr) || gridMark.height !== Math.ceil(gh * dpr)) {
        gridMark.width = Math.ceil(gw * dpr); gridMark.height = Math.ceil(gh * dpr);
        gridMark.style.width = gw + "px"; gridMark.style.height = gh + "px";
      }
      const t = gridMark.getContext("2d");
      t.setTransform(dpr, 0, 0, dpr, 0, 0);
      t.clearRect(0, 0, gw, gh);
      t.strokeStyle = "#ff3030"; t.lineWidth = 1.5;
      for (let l = 0; l < nL; l++) {
        for (let hd = 0; hd < nH; hd++) {
          const [x, y] = at[l * nH + hd]; // the thumbnail's place in the grid
          if (a !== null) t.strokeRect(x + 0.75, y + (a / Lq) * thumbPx, thumbPx - 1.5, Math.max(2, thumbPx / Lq));
          if (b !== null) t.strokeRect(x + (b / Lk) * thumbPx, y + 0.75, Math.max(2, thumbPx / Lk), thumbPx - 1.5);
        }
      }
    }
    const shown = layer() * nH + head(), g = geom.grid;
    if (shown !== scrolledTo && gw > 0) { // a tall grid scrolls: keep the open head's row in view, under the head names
      scrolledTo = shown;
      const y = at[shown][1] - at[0][1];
      if (y < g.top || y + thumbPx > g.top + g.h - at[0][1]) { grid.scrollTop = y; g.top = y; }
    }
    if (current !== `${layer()}:${head()}`) {
      current = `${layer()}:${head()}`;
      for (let l = 0; l < nL; l++) {
        for (let hd = 0; hd < nH; hd++) {
          const btn = thumbs[l][hd][0].parentElement, now = l === layer() && hd === head();
          btn.classList.toggle("is-current", now); btn.setAttribute("aria-pressed", String(now));
        }
      }
    }
  }

  let chipRange = [0, 1]; // the range of the map on display, set once per update()
  function shade(chip, v, isMask, text) {
    if (isMask) {
      chip.style.background = maskCss; chip.style.color = "#000"; chip.dataset.weight = "masked";
      chip.title = text + ": masked";
      return;
    }
    const k = colourIndex(v, chipRange);
    chip.style.background = rgb(k); chip.style.color = inkFor(k);
    chip.title = `${text}: ${fmt(v)}`; chip.dataset.weight = fmt(v);
  }
  const clear = (chip) => { chip.style.background = ""; chip.style.color = ""; chip.removeAttribute("title"); chip.removeAttribute("data-weight"); };
  // Long strips scroll: only the chips in view (and a row either side) are shaded, re-shaded on scroll.
  // Shading all 512 cost 10-15 ms a hover in Chromium, most of the hover budget.
  const ALL_AT_MOST = 64;
  function inView(strip, chips) { // indices of the chips of a strip worth shading now
    const g = strip === kStrip ? geom.k : geom.q;
    if (chips.length <= ALL_AT_MOST || g.height === 0) return chips.map((_, k) => k);
    const lo = g.scrollTop - 24, hi = g.scrollTop + g.height + 24, out = [];
    for (let k = 0; k < chips.length; k++) { const t = g.tops[k]; if (t >= lo && t <= hi) out.push(k); }
    return out;
  }

  // Layout, read once and kept: where each chip sits in its strip, where each thumbnail sits in the grid.
  // Reading offsetTop or offsetLeft after update() has restyled chips forces the browser to lay the whole
  // widget out again in the middle of a hover (at 6 x 12 x 512 that was most of a hover's work). So update()
  // never reads layout; measure() does, first thing in update(), only after a ResizeObserver, a font or a
  // scroll said the layout changed.
  const geom = { dirty: true, k: { tops: [], height: 0, scrollTop: 0 }, q: { tops: [], height: 0, scrollTop: 0 },
    grid: { gw: 0, gh: 0, at: [], h: 0, top: 0 } };
  function measureStrip(strip, chips, g) {
    g.height = strip.clientHeight; g.scrollTop = strip.scrollTop;
    if (chips.length <= ALL_AT_MOST) return;
    const base = chips.length ? chips[0].offsetTop : 0;
    g.tops = chips.map((c) => c.offsetTop - base);
  }
  function measure() {
    if (!geom.dirty) return;
    geom.dirty = false;
    measureStrip(kStrip, kChips, geom.k); measureStrip(qStrip, qChips, geom.q);
    if (explorer) {
      geom.grid.gw = grid.scrollWidth; geom.grid.gh = grid.scrollHeight; marked = ""; // outlines drawn again
      geom.grid.h = grid.clientHeight; geom.grid.top = grid.scrollTop;
      geom.grid.at = thumbs.flat().map(([c]) => [c.parentElement.offsetLeft + c.offsetLeft, c.parentElement.offsetTop + c.offsetTop]);
    }
  }
  const relayout = () => { geom.dirty = true; update(); };
  const resized = typeof ResizeObserver === "function" ? new ResizeObserver(relayout) : null;
  if (resized) [qStrip, kStrip].concat(explorer ? [grid] : []).forEach((node) => resized.observe(node));
  if (document.fonts) document.fonts.addEventListener("loadingdone", relayout);
  const cellText = (i, j) => (isMasked(i, j) ? "masked" : fmt(weight(i, j)));

  function update() { // cheap: overlay + chips + readout, no repaint of the map itself
    measure(); // reads layout only when it changed, and before anything below writes
    const a = activeRow(), b = activeCol(), sel = selRow(), selK = selCol();
    chipRange = rangeOf(layer(), head());
    Object.assign(root.dataset, { activeRow: a ?? "", hoverRow: view.hover ?? "", activeCol: b ?? "",
      selected: sel ?? "", selectedKey: selK ?? "" });
    if (cur === null) { // a big explorer's map on its way from the kernel
      octx.clearRect(0, 0, W, H); view.kShaded.forEach((j) => clear(kChips[j])); view.qShadedList.forEach((i) => clear(qChips[i]));
      view.kShaded = []; view.qShadedList = []; view.qShaded = false;
      readout.textContent = `loading the exact map of ${lname(layer())}, head ${head()} from the kernel\u2026`;
      if (explorer) drawThumbs();
      return;
    }
    octx.clearRect(0, 0, W, H);
    octx.fillStyle = "rgba(0,0,0,0.5)"; // dim what is not lit
    if (a !== null) {
      octx.fillRect(left, top, Lk * cell, a * cell);
      octx.fillRect(left, top + (a + 1) * cell, Lk * cell, (Lq - a - 1) * cell);
    } else if (b !== null) {
      octx.fillRect(left, top, b * cell, Lq * cell);
      octx.fillRect(left + (b + 1) * cell, top, (Lk - b - 1) * cell, Lq * cell);
    }
    octx.strokeStyle = "#ff3030"; octx.lineWidth = 2;
    if (a !== null) octx.strokeRect(left - 1, top + a * cell - 1, Lk * cell + 2, cell + 2);
    if (b !== null) {
      octx.strokeStyle = a !== null ? "#fff" : "#ff3030"; octx.lineWidth = a !== null ? 1.5 : 2;
      if (a !== null) octx.strokeRect(left + b * cell - 1, top + a * cell - 1, cell + 2, cell + 2);
      else octx.strokeRect(left + b * cell - 1, top - 1, cell + 2, Lq * cell + 2);
    }
    const kList = a === null ? view.kShaded : inView(kStrip, kChips), kSet = new Set(kList);
    for (const j of view.kShaded) if (!kSet.has(j) || a === null) clear(kChips[j]);
    if (a !== null) for (const j of kList) shade(kChips[j], weight(a, j), isMasked(a, j), `${qTok[a]} \u2192 ${kTok[j]}`);
    view.kShaded = a === null ? [] : kList;
    for (const j of [view.lastB, b]) if (j !== null && j !== undefined) kChips[j].classList.toggle("is-hovered", j === b);
    view.lastB = b;
    if (selK !== view.lastSelK) { // pinned state: touched only when the pin changes
      for (const j of [view.lastSelK, selK]) {
        if (j === null || j === undefined) continue;
        kChips[j].classList.toggle("is-pinned", j === selK); kChips[j].setAttribute("aria-pressed", String(j === selK));
      }
      view.lastSelK = selK;
    }
    const qShade = a === null && b !== null; // query chips carry a column only when no row is lit
    const qList = qShade ? inView(qStrip, qChips) : [], qSet = new Set(qList);
    for (const i of view.qShadedList) if (!qSet.has(i)) clear(qChips[i]); // untouched chips are left alone
    for (const i of qList) shade(qChips[i], weight(i, b), isMasked(i, b), `${qTok[i]} \u2192 ${kTok[b]}`);
    view.qShadedList = qList;
    for (const i of [view.lastA, a]) if (i !== null && i !== undefined) qChips[i].classList.toggle("is-active", i === a);
    view.lastA = a;
    if (sel !== view.lastSel) {
      for (const i of [view.lastSel, sel]) {
        if (i === null || i === undefined) continue;
        qChips[i].classList.toggle("is-pinned", i === sel); qChips[i].setAttribute("aria-pressed", String(i === sel));
      }
      view.lastSel = sel;
    }
    view.qShaded = qShade;
    pin.hidden = sel === null && selK === null;
    pin.textContent = [sel !== null ? `pinned query: ${qTok[sel]}` : "", selK !== null ? `pinned key: ${kTok[selK]}` : ""]
      .filter(Boolean).join(" \u00b7 ") + (pin.hidden ? "" : " \u00d7");
    const word = raw ? "score" : "weight";
    if (a !== null && b !== null) {
      readout.textContent = `${qTok[a]} \u2192 ${kTok[b]}: ${cellText(a, b)}`;
    } else if (a !== null) {
      let best = -1;
      for (let j = 0; j < Lk; j++) if (!isMasked(a, j) && (best < 0 || weight(a, j) > weight(a, best))) best = j;
      readout.textContent = best < 0 ? `${qTok[a]}: every key is masked`
        : `${qTok[a]} \u2192 ${kTok[best]}: ${fmt(weight(a, best))} (largest ${word})` + (a === sel && view.hover === null ? " \u00b7 pinned" : "");
    } else if (b !== null) {
      let best = -1;
      for (let i = 0; i < Lq; i++) if (!isMasked(i, b) && (best < 0 || weight(i, b) > weight(best, b))) best = i;
      readout.textContent = best < 0 ? `${kTok[b]}: masked for every query`
        : `who attends to ${kTok[b]}: ${qTok[best]} \u2192 ${kTok[b]}: ${fmt(weight(best, b))} (largest ${word})`;
    } else {
      readout.textContent = "Hover a query (row) to see where it looks, or a key (column) to see who looks at it; click to pin.";
    }
    if (root.dataset.exact === "0") readout.textContent += " (\u2248 8-bit copy)";
    if (shownView() === "lines") {
      lkChips.forEach((c, j) => {
        if (a === null) clear(c); else shade(c, weight(a, j), isMasked(a, j), `${qTok[a]} \u2192 ${kTok[j]}`);
        c.classList.toggle("is-hovered", j === b); c.classList.toggle("is-pinned", j === selK);
      });
      lqChips.forEach((c, i) => {
        if (a === null && b !== null) shade(c, weight(i, b), isMasked(i, b), `${qTok[i]} \u2192 ${kTok[b]}`); else clear(c);
        c.classList.toggle("is-active", i === a); c.classList.toggle("is-pinned", i === sel);
      });
      drawLines();
    }
    if (explorer) drawThumbs();
  }

  function setHover(i, j) {
    if (i === view.hover && j === view.hoverCol) return;
    view.hover = i; view.hoverCol = j;
    update();
  }
  function save(name, v) { model.set(name, v); model.save_changes(); }
  const togglePin = (i) => save("selected", selRow() === i ? null : i);
  const toggleKey = (j) => save("selected_key", selCol() === j ? null : j);
  function where(ev) { // [kind, i, j]: a cell, a query label (left) or a key label (top)
    const b = canvas.getBoundingClientRect();
    const x = ev.clientX - b.left - left, y = ev.clientY - b.top - top;
    const i = Math.floor(y / cell), j = Math.floor(x / cell);
    const inI = i >= 0 && i < Lq, inJ = j >= 0 && j < Lk;
    if (inI && inJ) return ["cell", i, j];
    if (inI && x < 0) return ["query", i, null];
    if (inJ && y < 0) return ["key", null, j];
    return [null, null, null];
  }

  // ---- events (delegated, so a 512-token strip has a few listeners, not 1024) ----
  const on = (node, type, fn) => node.addEventListener(type, fn);
  const idx = (ev, name) => { const c = ev.target.closest(`[data-${name}]`); return c ? Number(c.dataset[name]) : null; };
  on(qStrip, "mouseover", (ev) => { const i = idx(ev, "i"); if (i !== null) setHover(i, null); });
  on(qStrip, "mouseleave", () => setHover(null, null));
  on(qStrip, "click", (ev) => { const i = idx(ev, "i"); if (i !== null) togglePin(i); });
  on(kStrip, "mouseover", (ev) => { const j = idx(ev, "j"); if (j !== null) setHover(view.hover, j); });
  on(kStrip, "mouseleave", () => setHover(null, null));
  on(kStrip, "scroll", () => { geom.k.scrollTop = kStrip.scrollTop; update(); });
  on(qStrip, "scroll", () => { geom.q.scrollTop = qStrip.scrollTop; update(); });
  if (explorer) on(grid, "scroll", () => { geom.grid.top = grid.scrollTop; });
  on(kStrip, "click", (ev) => { const j = idx(ev, "j"); if (j !== null) toggleKey(j); });
  on(canvas, "mousemove", (ev) => { const [, i, j] = where(ev); setHover(i, j); });
  on(canvas, "mouseleave", () => setHover(null, null));
  on(canvas, "click", (ev) => {
    const [kind, i, j] = where(ev);
    if (kind === "key") toggleKey(j); else if (i !== null) togglePin(i);
  });
  on(lqCol, "mouseover", (ev) => { const i = idx(ev, "i"); if (i !== null) setHover(i, null); });
  on(lqCol, "mouseleave", () => setHover(null, null));
  on(lqCol, "click", (ev) => { const i = idx(ev, "i"); if (i !== null) togglePin(i); });
  on(lkCol, "mouseover", (ev) => { const j = idx(ev, "j"); if (j !== null) setHover(null, j); });
  on(lkCol, "mouseleave", () => setHover(null, null));
  on(lkCol, "click", (ev) => { const j = idx(ev, "j"); if (j !== null) toggleKey(j); });
  on(viewSel, "change", () => save("view", viewSel.value));
  on(pin, "click", () => { model.set("selected", null); model.set("selected_key", null); model.save_changes(); });
  on(root, "keydown", (ev) => {
    const tag = ev.target.tagName;
    if (tag === "SELECT" || ((tag === "BUTTON" || tag === "INPUT") && ev.key !== "Escape")) return;
    const a = activeRow(), b = activeCol();
    const move = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[ev.key];
    if (move) {
      ev.preventDefault();
      const clamp = (v, n) => Math.max(0, Math.min(n - 1, v));
      if (move[0]) setHover(clamp(a === null ? (move[0] > 0 ? -1 : Lq) + move[0] : a + move[0], Lq), view.hoverCol);
      else setHover(view.hover, clamp(b === null ? (move[1] > 0 ? -1 : Lk) + move[1] : b + move[1], Lk));
    } else if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      if (view.hover !== null) togglePin(view.hover);
      if (view.hoverCol !== null) toggleKey(view.hoverCol);
    } else if (ev.key === "Escape") {
      ev.preventDefault();
      view.hover = null; view.hoverCol = null;
      model.set("selected", null); model.set("selected_key", null); model.save_changes();
      update();
    }
  });
  on(sinkBox, "change", () => save("clip_sink", sinkBox.checked));
  on(scaleSel, "change", () => {
    const choice = scaleSel.value; // read first: setting vmin/vmax redraws and resets the menu
    if (choice === "fixed") { // 0..1 for weights, the current range for raw scores
      const [lo, hi] = raw ? rangeOf(layer(), head()) : [0, 1];
      model.set("vmin", lo); model.set("vmax", hi);
    }
    save("scale", choice);
  });
  if (explorer) {
    on(layerSel, "change", () => save("layer", Number(layerSel.value)));
    on(headSel, "change", () => save("head", Number(headSel.value)));
    on(grid, "click", (ev) => {
      const b = ev.target.closest("[data-head]");
      if (b) { model.set("layer", Number(b.dataset.layer)); model.set("head", Number(b.dataset.head)); model.save_changes(); }
    });
  }

  // ---- model -> view ----
  const onSelected = () => update();
  const onTitle = () => { titleEl.textContent = model.get("title") || ""; };
  const onScale = () => {
    images.clear(); thumbImages.clear();
    scaleSel.value = model.get("scale"); sinkBox.checked = !!model.get("clip_sink");
    drawMap(); if (explorer) drawThumbBases(); update();
  };
  const onLayerHead = () => {
    layerSel.value = String(layer()); headSel.value = String(head()); cur = valsOf(layer(), head()); drawMap(); update();
  };
  const onExact = () => { takeExact(); if (cur === null) onLayerHead(); };
  const onView = () => {
    const v = shownView();
    mapBox.hidden = v === "lines"; linesBox.hidden = v !== "lines"; viewSel.value = v; root.dataset.view = v;
    drawMap(); update();
  };
  const hooks = [["change:selected", onSelected], ["change:selected_key", onSelected], ["change:title", onTitle],
    ["change:scale", onScale], ["change:vmin", onScale], ["change:vmax", onScale], ["change:clip_sink", onScale],
    ["change:view", onView]];
  if (explorer) hooks.push(["change:layer", onLayerHead], ["change:head", onLayerHead]);
  if (lazy) hooks.push(["change:_exact", onExact]);
  hooks.forEach(([ev, f]) => model.on(ev, f));
  scaleSel.value = model.get("scale"); sinkBox.checked = !!model.get("clip_sink");
  if (explorer) { layerSel.value = String(layer()); headSel.value = String(head()); }
  if (lazy) takeExact();
  cur = valsOf(layer(), head());
  if (explorer) drawThumbBases();
  onView(); // draws the map (or lines) and the readout
  root.dataset.renderMs = (performance.now() - t0).toFixed(1);

  return () => { // cleanup when the view is removed
    hooks.forEach(([ev, f]) => model.off(ev, f));
    if (resized) resized.disconnect();
    if (document.fonts) document.fonts.removeEventListener("loadingdone", relayout);
    root.remove();
  };
}

export default { render };
