// Runs timeline.html's scripts against a minimal DOM; prints what they drew, as JSON.
const fs = require("fs"), vm = require("vm");
const html = fs.readFileSync(process.argv[2], "utf8");
function between(open, from) {
  const s = html.indexOf(open, from);
  if (s < 0) { throw new Error("missing " + open); }
  const b = s + open.length;
  return [html.slice(b, html.indexOf("</script>", b)), b];
}
class Node_ {
  constructor(tag, id) {
    Object.assign(this, { tagName: tag, id: id || "", children: [], parent: null, style: {}, attrs: {},
      dataset: {}, listeners: {}, text: "", className: "", hidden: false, scrollTop: 0, scrollLeft: 0,
      clientHeight: id === "timeline" ? 800 : 0, clientWidth: id === "timeline" ? 1200 : 0, value: "" });
  }
  appendChild(c) {
    const add = c.fragment ? c.children.splice(0) : [c];
    for (const x of add) { x.parent = this; this.children.push(x); }
    return c;
  }
  get textContent() { return this.text + this.children.map(c => c.textContent).join(""); }
  set textContent(v) { this.children = []; this.text = String(v); }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; }
  addEventListener(t, f) { (this.listeners[t] = this.listeners[t] || []).push(f); }
  fire(t, target) { for (const f of this.listeners[t] || []) { f({ target: target || this, preventDefault() {} }); } }
  closest(sel) {
    for (let e = this; e; e = e.parent) { if (sel === ".op" && e.className.split(" ").includes("op")) { return e; } }
    return null;
  }
  click() { this.fire("click"); }
  walk(f) { f(this); for (const c of this.children) { if (c.walk) { c.walk(f); } } }
}
const statics = {};
for (const id of html.match(/ id="[^"]+"/g).map(m => m.slice(5, -1))) { statics[id] = new Node_("x", id); }
for (const id of ["tl-meta", "tl-cols", "tl-values"]) { statics[id].text = between('id="' + id + '">')[0]; }
const body = new Node_("body");
const frames = [], windowListeners = {};
let hash = process.argv[3] || "";
const window = {
  requestAnimationFrame(f) { frames.push(f); },
  addEventListener(t, f) { (windowListeners[t] = windowListeners[t] || []).push(f); },
  location: {
    get hash() { return hash; },
    set hash(v) { hash = v.startsWith("#") ? v : "#" + v; for (const f of windowListeners.hashchange || []) { f(); } },
  },
  history: { replaceState(a, b, url) { hash = url; } },
};
const document = {
  body,
  getElementById(id) {
    if (statics[id]) { return statics[id]; }
    let found = null;
    statics["tl-canvas"].walk(e => { if (!found && e.id === id) { found = e; } });
    return found;
  },
  createElement(tag) { return new Node_(tag); },
  createDocumentFragment() { const f = new Node_("#fragment"); f.fragment = true; return f; },
  createTextNode(text) { return { textContent: String(text) }; },
  addEventListener() {},
};
window.document = document;
const context = vm.createContext({ window, document, JSON, Math, Number, String, Error, Map, Int8Array,
  Int32Array, Uint32Array, Float64Array, Infinity, isNaN });
function run(code) {
  try { vm.runInContext(code, context); } catch (e) { window.onerror(String(e && e.stack || e), "", 0, 0); }
}
// The error hook is the first plain <script>, the timeline script the last.
const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map(m => m[1]);
run(scripts[0]);
context.onerror = window.onerror;
run(scripts[scripts.length - 1]);
const frame = () => { while (frames.length) { try { frames.shift()(); } catch (e) { window.onerror(String(e.stack), "", 0, 0); } } };
frame();
const drawn = () => {
  const bars = [], ids = [];
  statics["tl-canvas"].walk(e => {
    if (e.id) { ids.push(e.id); }
    if (e.className && e.className.split(" ").includes("op")) { bars.push({ index: e.attrs["data-index"], cls: e.className }); }
  });
  return { bars, ids, hl: bars.filter(b => b.cls.split(" ").includes("hl")).map(b => b.index) };
};
const out = { initial: drawn(), panel: statics["tl-panel"].hidden ? null : statics["tl-panel-table"].textContent };
for (const step of (process.argv[4] || "").split(",").filter(Boolean)) {
  if (step.startsWith("#")) { window.location.hash = step; } else { statics[step].click(); }
  frame();
  out[step] = drawn();
}
out.status = statics["tl-status"].textContent;
out.errors = body.dataset.scriptErrors;
out.ops = body.dataset.ops;
console.log(JSON.stringify(out));
