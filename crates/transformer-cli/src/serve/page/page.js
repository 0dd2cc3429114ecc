// The page of `transformer serve`: translate, show the n-best list of the chosen sentence and its
// encoder–decoder attention as a grid of cells. `#q=TEXT` in the address fills in TEXT and
// translates it at once (a link to a translation; `chromium --screenshot` of one).
"use strict";
const $ = (id) => document.getElementById(id);
let result = null; // {lines, translations, nbest, attention}
let chosen = 0;

function setStatus(text, state) {
  const s = $("status");
  s.textContent = text;
  s.dataset.state = state;
}

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props || {});
  for (const c of children) e.append(c);
  return e;
}

async function translate() {
  const lines = $("src").value.split("\n").filter((l) => l.trim().length > 0);
  if (lines.length === 0) {
    setStatus("Type an English sentence first.", "error");
    return;
  }
  const beam = Math.max(1, parseInt($("beam").value, 10) || 4);
  const nbest = Math.min(beam, Math.max(1, parseInt($("nbest").value, 10) || 1));
  const alpha = parseFloat($("alpha").value);
  const body = { q: lines, beam, nbest, attention: true };
  if (Number.isFinite(alpha)) body.alpha = alpha;
  $("go").disabled = true;
  setStatus("translating…", "busy");
  const start = performance.now();
  try {
    const r = await fetch("/translate", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const j = await r.json();
    if (!r.ok) {
      setStatus(`${r.status}: ${j.error || r.statusText}`, "error");
      return;
    }
    result = { lines, ...j };
    chosen = 0;
    render();
    const ms = Math.round(performance.now() - start);
    setStatus(`${lines.length} sentence${lines.length > 1 ? "s" : ""} in ${ms} ms`, "done");
  } catch (e) {
    setStatus(`the server did not answer: ${e}`, "error");
  } finally {
    $("go").disabled = false;
  }
}

function render() {
  $("output").hidden = false;
  const list = $("translations");
  list.replaceChildren();
  result.translations.forEach((t, i) => {
    const li = el("li", { className: i === chosen ? "chosen" : "" },
      el("span", { className: "src", textContent: result.lines[i] }),
      el("span", { className: "text", id: `translation-${i}`, textContent: t }));
    li.addEventListener("click", () => { chosen = i; render(); });
    list.append(li);
  });
  $("nbest-of").textContent = result.lines.length > 1 ? `(sentence ${chosen + 1})` : "";
  const body = $("nbest-table").tBodies[0];
  body.replaceChildren();
  (result.nbest ? result.nbest[chosen] : []).forEach((h, k) => {
    body.append(el("tr", {},
      el("td", { textContent: String(k + 1) }),
      el("td", { className: "hyp", textContent: h.text }),
      el("td", { className: "num", textContent: h.log_prob.toFixed(3) }),
      el("td", { className: "num", textContent: h.score.toFixed(3) })));
  });
  fillSelectors();
  drawHeatmap();
}

function fillSelectors() {
  const a = result.attention && result.attention[chosen];
  const layer = $("layer"), head = $("head");
  if (!a) { layer.replaceChildren(); head.replaceChildren(); return; }
  if (layer.options.length !== a.layers) {
    layer.replaceChildren(...Array.from({ length: a.layers }, (_, l) => el("option", { value: l, textContent: l + 1 })));
    layer.value = a.layers - 1;
  }
  if (head.options.length !== a.heads + 1) {
    head.replaceChildren(el("option", { value: "mean", textContent: "mean of heads" }),
      ...Array.from({ length: a.heads }, (_, h) => el("option", { value: h, textContent: h + 1 })));
  }
}

function drawHeatmap() {
  const grid = $("heatmap");
  grid.replaceChildren();
  const a = result && result.attention && result.attention[chosen];
  if (!a) return;
  const l = parseInt($("layer").value, 10) || 0;
  const hv = $("head").value;
  const heads = hv === "mean" ? a.weights[l] : [a.weights[l][parseInt(hv, 10)]];
  const rows = a.target.length, cols = a.source.length;
  grid.style.gridTemplateColumns = `max-content repeat(${cols}, minmax(1.8em, 1fr))`;
  grid.append(el("div"));
  for (const s of a.source) grid.append(el("div", { className: "col", textContent: s }));
  for (let t = 0; t < rows; t++) {
    grid.append(el("div", { className: "row", textContent: a.target[t] }));
    for (let s = 0; s < cols; s++) {
      let w = 0;
      for (const h of heads) w += h[t * cols + s];
      w /= heads.length;
      const cell = el("div", { className: "cell", title: `${a.target[t]} ← ${a.source[s]}: ${w.toFixed(3)}` });
      cell.style.background = `rgba(29, 78, 216, ${Math.min(1, w).toFixed(3)})`;
      grid.append(cell);
    }
  }
}

$("go").addEventListener("click", translate);
$("src").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) translate();
});
$("layer").addEventListener("change", drawHeatmap);
$("head").addEventListener("change", drawHeatmap);
if (location.hash.startsWith("#q=")) {
  $("src").value = decodeURIComponent(location.hash.slice(3));
  $("go").click(); // the same path as a person pressing the button
}
