// Browser side of attnlib.widgets (AttentionHeatmap, AttentionExplorer).
// Vanilla ES module, no build step, no dependencies. Every piece of state lives in the
// closure of one render() call and every element hangs under `el`, so any number of
// widgets (or views of one widget) work side by side on a page.
//
// Model traits read here (written by attnlib/widgets.py):
//   _weights      float32 little-endian bytes, C order, shape _shape
//   _shape        [layers, heads, Lq, Lk]
//   _palette      256 x RGB bytes (the colormap)
//   _query_tokens, _key_tokens, _layer_names, _kind ("heatmap" | "explorer"), title, raw_scores
//   selected (synced, null or a query index), layer and head (explorer only, synced)

const MAX_SIDE = 512; // CSS px of the longer side; up to 512 tokens a cell is >= 1 px (more: shrunk, point via the token strips)
const LABEL_MIN_CELL = 9; // draw token labels beside the map when cells are at least this big
const THUMB = 72; // CSS px of an overview thumbnail

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
  throw new Error("attnlib: cannot read binary trait of type " + typeof v);
}

function floatsOf(v) {
  const b = bytesOf(v);
  if (b.byteOffset % 4 === 0) return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  return new Float32Array(b.slice().buffer); // unaligned view: copy once
}

const fmt = (v) => v.toFixed(3);
const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

function render({ model, el }) {
  const t0 = performance.now();
  const [nL, nH, Lq, Lk] = model.get("_shape");
  const data = floatsOf(model.get("_weights"));
  const pal = bytesOf(model.get("_palette"));
  const qTok = model.get("_query_tokens");
  const kTok = model.get("_key_tokens");
  const raw = model.get("raw_scores");
  const explorer = model.get("_kind") === "explorer";
  const layerNames = model.get("_layer_names") || [];
  const layer = () => (explorer ? model.get("layer") : 0);
  const head = () => (explorer ? model.get("head") : 0);
  const view = { hover: null, hoverCol: null }; // local, never synced: no kernel round trip
  const mapStart = (l, hd) => (l * nH + hd) * Lq * Lk;
  const weight = (i, j) => data[mapStart(layer(), head()) + i * Lk + j];

  // Colour range of one map: 0..max for weights, min..max for raw scores.
  const ranges = new Map();
  function rangeOf(l, hd) {
    const key = l + ":" + hd;
    if (!ranges.has(key)) {
      let lo = Infinity, hi = -Infinity;
      const s = mapStart(l, hd);
      for (let p = s; p < s + Lq * Lk; p++) { const v = data[p]; if (v < lo) lo = v; if (v > hi) hi = v; }
      if (!raw) lo = 0;
      ranges.set(key, [lo, hi > lo ? hi : lo + 1]);
    }
    return ranges.get(key);
  }
  function colourIndex(v, [lo, hi]) {
    const k = Math.round(((v - lo) / (hi - lo)) * 255);
    return k < 0 ? 0 : k > 255 ? 255 : k;
  }
  function rgb(k) { return `rgb(${pal[3 * k]},${pal[3 * k + 1]},${pal[3 * k + 2]})`; }
  function inkFor(k) { // black text on light colours, white on dark ones
    const lum = 0.299 * pal[3 * k] + 0.587 * pal[3 * k + 1] + 0.114 * pal[3 * k + 2];
    return lum > 140 ? "#000" : "#fff";
  }

  // One pixel per cell, painted once per (layer, head) into an off-screen canvas.
  const images = new Map();
  function imageOf(l, hd) {
    const key = l + ":" + hd;
    if (!images.has(key)) {
      const c = document.createElement("canvas");
      c.width = Lk; c.height = Lq;
      const ctx = c.getContext("2d");
      const img = ctx.createImageData(Lk, Lq);
      const px = img.data, s = mapStart(l, hd), r = rangeOf(l, hd);
      for (let p = 0; p < Lq * Lk; p++) {
        const k = colourIndex(data[s + p], r);
        px[4 * p] = pal[3 * k]; px[4 * p + 1] = pal[3 * k + 1]; px[4 * p + 2] = pal[3 * k + 2]; px[4 * p + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
      images.set(key, c);
    }
    return images.get(key);
  }

  // ---- DOM ----
  const root = h("div", { class: "attnlib-attn", "data-testid": "attn-root", "data-kind": explorer ? "explorer" : "heatmap" });
  const header = h("div", { class: "attnlib-header" });
  const titleEl = h("span", { class: "attnlib-title", "data-testid": "title" }, model.get("title") || "");
  header.append(titleEl);
  const pin = h("button", { class: "attnlib-pin", "data-testid": "pinned-marker", type: "button", title: "click to unpin" });
  pin.hidden = true;
  header.append(pin);
  root.append(header);

  let layerSel = null, headSel = null, overview = null;
  const thumbs = [];
  if (explorer) {
    const controls = h("div", { class: "attnlib-controls" });
    layerSel = h("select", { "data-testid": "layer-select", "aria-label": "layer" });
    for (let l = 0; l < nL; l++) layerSel.append(h("option", { value: String(l) }, layerNames[l] || "layer " + l));
    headSel = h("select", { "data-testid": "head-select", "aria-label": "head" });
    for (let hd = 0; hd < nH; hd++) headSel.append(h("option", { value: String(hd) }, "head " + hd));
    const lab1 = h("label", {}, "layer "), lab2 = h("label", {}, "head ");
    lab1.append(layerSel); lab2.append(headSel);
    controls.append(lab1, lab2);
    overview = h("div", { class: "attnlib-overview", "data-testid": "head-overview" });
    for (let hd = 0; hd < nH; hd++) {
      const b = h("button", { class: "attnlib-thumb", type: "button", "data-testid": `head-thumb-${hd}`, "data-head": String(hd), title: `open head ${hd}` });
      const c = h("canvas", { width: String(THUMB), height: String(THUMB) });
      b.append(c, h("span", {}, "head " + hd));
      overview.append(b);
      thumbs.push(c);
    }
    root.append(controls, overview);
  }

  root.append(h("div", { class: "attnlib-caption" }, "queries (rows): hover to preview, click to pin"));
  const qStrip = h("div", { class: "attnlib-tokens", "data-testid": "query-tokens" });
  // Built as one escaped HTML string: one parse instead of a createElement per token.
  qStrip.innerHTML = qTok.map((t, i) => `<span class="attnlib-tok attnlib-q" data-testid="query-token-${i}" data-i="${i}" `
    + `tabindex="0" role="button" aria-pressed="false">${esc(t)}</span>`).join("");
  const qChips = Array.from(qStrip.children);
  root.append(qStrip, h("div", { class: "attnlib-caption" }, "keys (columns): shaded by the weight of the highlighted query"));
  const kStrip = h("div", { class: "attnlib-tokens", "data-testid": "key-tokens" });
  kStrip.innerHTML = kTok.map((t, j) => `<span class="attnlib-tok attnlib-k" data-testid="key-token-${j}" data-j="${j}">${esc(t)}</span>`).join("");
  const kChips = Array.from(kStrip.children);
  const readout = h("div", { class: "attnlib-readout", "data-testid": "readout", "aria-live": "polite" });
  root.append(kStrip, readout);

  // ---- the matrix: a canvas for cells and labels, an overlay canvas for the highlight ----
  const maxL = Math.max(Lq, Lk);
  const cell = maxL <= MAX_SIDE ? Math.min(28, Math.floor(MAX_SIDE / maxL)) : MAX_SIDE / maxL;
  const labels = cell >= LABEL_MIN_CELL;
  const canvas = h("canvas", { class: "attnlib-map", "data-testid": "heatmap-canvas" });
  const overlay = h("canvas", { class: "attnlib-overlay", "data-testid": "heatmap-overlay" });
  const ctx = canvas.getContext("2d"), octx = overlay.getContext("2d");
  const font = "11px monospace";
  ctx.font = font;
  const clip = (s) => (s.length > 12 ? s.slice(0, 11) + "\u2026" : s);
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
  const legend = h("div", { class: "attnlib-legend", "data-testid": "legend" });
  root.append(mapBox, legend);
  el.append(root);

  function drawMap() {
    const l = layer(), hd = head();
    ctx.clearRect(0, 0, W, H);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(imageOf(l, hd), left, top, Lk * cell, Lq * cell);
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
    const [lo, hi] = rangeOf(l, hd);
    legend.textContent = (raw ? `raw scores, colour ${fmt(lo)} to ${fmt(hi)}` : `colour 0 to ${fmt(hi)} (largest weight in this map)`)
      + " \u00b7 rows = queries, columns = keys" + (explorer ? ` \u00b7 ${layerNames[l] || "layer " + l}, head ${hd}` : "");
    root.dataset.layer = String(l); root.dataset.head = String(hd);
  }

  function drawThumbs() {
    const l = layer(), a = activeRow();
    thumbs.forEach((c, hd) => {
      const t = c.getContext("2d");
      t.imageSmoothingEnabled = false;
      t.drawImage(imageOf(l, hd), 0, 0, THUMB, THUMB);
      if (a !== null) {
        const y = (a / Lq) * THUMB, hh = Math.max(2, THUMB / Lq);
        t.strokeStyle = "#ff4d4d"; t.lineWidth = 1.5; t.strokeRect(0.75, y, THUMB - 1.5, hh);
      }
      c.parentElement.classList.toggle("is-current", hd === head());
      c.parentElement.setAttribute("aria-pressed", String(hd === head()));
    });
  }

  const activeRow = () => (view.hover !== null ? view.hover : model.get("selected") ?? null);

  function update() { // cheap: overlay + chips + readout, no repaint of the map itself
    const a = activeRow(), sel = model.get("selected") ?? null;
    root.dataset.activeRow = a === null ? "" : String(a);
    root.dataset.hoverRow = view.hover === null ? "" : String(view.hover);
    root.dataset.selected = sel === null ? "" : String(sel);
    octx.clearRect(0, 0, W, H);
    if (a !== null) {
      octx.fillStyle = "rgba(0,0,0,0.5)"; // dim every other row
      octx.fillRect(left, top, Lk * cell, a * cell);
      octx.fillRect(left, top + (a + 1) * cell, Lk * cell, (Lq - a - 1) * cell);
      octx.strokeStyle = "#ff4d4d"; octx.lineWidth = 2;
      octx.strokeRect(left - 1, top + a * cell - 1, Lk * cell + 2, cell + 2);
      if (view.hoverCol !== null) {
        octx.strokeStyle = "#fff"; octx.lineWidth = 1.5;
        octx.strokeRect(left + view.hoverCol * cell - 1, top + a * cell - 1, cell + 2, cell + 2);
      }
    }
    const r = rangeOf(layer(), head());
    kChips.forEach((c, j) => {
      if (a === null) {
        c.style.background = ""; c.style.color = ""; c.removeAttribute("title"); c.removeAttribute("data-weight");
      } else {
        const v = weight(a, j), k = colourIndex(v, r);
        c.style.background = rgb(k); c.style.color = inkFor(k);
        c.title = `${qTok[a]} \u2192 ${kTok[j]}: ${fmt(v)}`;
        c.dataset.weight = fmt(v);
      }
      c.classList.toggle("is-hovered", j === view.hoverCol);
    });
    qChips.forEach((c, i) => {
      c.classList.toggle("is-active", i === a);
      c.classList.toggle("is-pinned", i === sel);
      c.setAttribute("aria-pressed", String(i === sel));
    });
    pin.hidden = sel === null;
    pin.textContent = sel === null ? "" : `pinned: ${qTok[sel]} \u00d7`;
    if (a === null) {
      readout.textContent = "Hover a query token (or a row of the map) to see where it looks; click to pin it.";
    } else if (view.hoverCol !== null) {
      readout.textContent = `${qTok[a]} \u2192 ${kTok[view.hoverCol]}: ${fmt(weight(a, view.hoverCol))}`;
    } else {
      let best = 0;
      for (let j = 1; j < Lk; j++) if (weight(a, j) > weight(a, best)) best = j;
      readout.textContent = `${qTok[a]} \u2192 ${kTok[best]}: ${fmt(weight(a, best))} (largest${raw ? " score" : " weight"})`
        + (a === sel && view.hover === null ? " \u00b7 pinned" : "");
    }
    if (explorer) drawThumbs();
  }

  function setHover(i, j = null) {
    if (i === view.hover && j === view.hoverCol) return;
    view.hover = i; view.hoverCol = j;
    update();
  }
  function togglePin(i) {
    model.set("selected", model.get("selected") === i ? null : i);
    model.save_changes();
  }
  function cellAt(ev) {
    const b = canvas.getBoundingClientRect();
    const x = ev.clientX - b.left - left, y = ev.clientY - b.top - top;
    const i = Math.floor(y / cell), j = Math.floor(x / cell);
    return i >= 0 && i < Lq && x >= 0 ? [i, j >= 0 && j < Lk ? j : null] : [null, null];
  }

  // ---- events (delegated, so a 512-token strip has two listeners, not 1024) ----
  const on = (node, type, fn) => node.addEventListener(type, fn);
  const qIndex = (ev) => { const c = ev.target.closest("[data-i]"); return c ? Number(c.dataset.i) : null; };
  on(qStrip, "mouseover", (ev) => { const i = qIndex(ev); if (i !== null) setHover(i, view.hoverCol); });
  on(qStrip, "mouseleave", () => setHover(null, null));
  on(qStrip, "click", (ev) => { const i = qIndex(ev); if (i !== null) togglePin(i); });
  on(qStrip, "focusin", (ev) => { const i = qIndex(ev); if (i !== null) setHover(i, null); });
  on(qStrip, "focusout", () => setHover(null, null));
  on(qStrip, "keydown", (ev) => {
    const i = qIndex(ev);
    if (i !== null && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); togglePin(i); }
  });
  on(kStrip, "mouseover", (ev) => {
    const c = ev.target.closest("[data-j]");
    if (c) { view.hoverCol = Number(c.dataset.j); update(); }
  });
  on(kStrip, "mouseleave", () => { view.hoverCol = null; update(); });
  on(canvas, "mousemove", (ev) => { const [i, j] = cellAt(ev); setHover(i, j); });
  on(canvas, "mouseleave", () => setHover(null, null));
  on(canvas, "click", (ev) => { const [i] = cellAt(ev); if (i !== null) togglePin(i); });
  on(pin, "click", () => { model.set("selected", null); model.save_changes(); });
  if (explorer) {
    const setLH = (name, v) => { model.set(name, v); model.save_changes(); };
    on(layerSel, "change", () => setLH("layer", Number(layerSel.value)));
    on(headSel, "change", () => setLH("head", Number(headSel.value)));
    on(overview, "click", (ev) => { const b = ev.target.closest("[data-head]"); if (b) setLH("head", Number(b.dataset.head)); });
  }

  // ---- model -> view ----
  const onSelected = () => update();
  const onTitle = () => { titleEl.textContent = model.get("title") || ""; };
  const onLayer = () => { images.clear(); layerSel.value = String(layer()); drawMap(); update(); };
  const onHead = () => { headSel.value = String(head()); drawMap(); update(); };
  model.on("change:selected", onSelected);
  model.on("change:title", onTitle);
  if (explorer) {
    model.on("change:layer", onLayer);
    model.on("change:head", onHead);
    layerSel.value = String(layer()); headSel.value = String(head());
  }
  drawMap();
  update();
  root.dataset.renderMs = (performance.now() - t0).toFixed(1);

  return () => { // cleanup when the view is removed
    model.off("change:selected", onSelected);
    model.off("change:title", onTitle);
    if (explorer) { model.off("change:layer", onLayer); model.off("change:head", onHead); }
    root.remove();
  };
}

export default { render };
