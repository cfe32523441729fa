// The parent side of the live widgets (tools/build_site.py): each widget frame reports its height,
// and the frames of one compare group relay layer, head and pins to each other. postMessage works
// between file:// documents too.
window.addEventListener("message", (e) => {
  const d = e.data || {};
  if (!d.attnlib) return;
  const frames = [...document.querySelectorAll("iframe.attnlib-frame")];
  const from = frames.find((f) => f.contentWindow === e.source);
  if (!from) return;
  if (typeof d.height === "number") from.style.height = d.height + "px";
  if (d.name) {
    for (const f of frames) {
      if (f !== from && f.dataset.group === from.dataset.group) {
        f.contentWindow.postMessage({ attnlibLink: true, name: d.name, value: d.value }, "*");
      }
    }
  }
});
