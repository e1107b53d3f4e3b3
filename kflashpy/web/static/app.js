// kflashpy web station: rendering only. Every check, burn and model run is done by the
// server's JSON API (kflashpy/web/app.py), which calls the kflashpy library.
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token") || "";
const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
};
const hex = (n) => "0x" + n.toString(16).toUpperCase().padStart(8, "0");
const size = (n) => n >= 1 << 20 ? (n / (1 << 20)).toFixed(2) + " MiB"
  : n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B";

const state = { meta: null, plan: [], ports: [], model: null, image: null, job: null };

function status(text, bad = false) {
  const s = $("#status");
  s.textContent = text;
  s.className = bad ? "bad" : "";
}

async function api(path, { method = "GET", body, raw = false } = {}) {
  const headers = { "X-Kflashpy-Token": TOKEN };
  if (body !== undefined && !(body instanceof FormData)) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method, headers,
    body: body === undefined ? undefined : body instanceof FormData ? body : JSON.stringify(body),
  });
  if (!resp.ok) {
    let msg = resp.status + " " + resp.statusText;
    try {
      const e = (await resp.json()).error;
      msg = e.message + (e.hint ? " (" + e.hint + ")" : "");
    } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return raw ? resp : resp.json();
}

function guarded(fn) {
  return async (...args) => {
    try { await fn(...args); } catch (e) { status(e.message, true); log("error: " + e.message); }
  };
}

function log(line) {
  const l = $("#log");
  l.textContent += line + "\n";
  l.scrollTop = l.scrollHeight;
}

async function saveBlob(resp, fallback) {
  const cd = resp.headers.get("Content-Disposition") || "";
  const m = /filename="?([^";]+)"?/.exec(cd);
  const url = URL.createObjectURL(await resp.blob());
  const a = el("a", { href: url, download: m ? m[1] : fallback });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

async function upload(file) {
  const fd = new FormData();
  fd.append("file", file, file.name);
  return api("/api/files", { method: "POST", body: fd });
}

// --- tabs -----------------------------------------------------------------------------

for (const b of document.querySelectorAll(".tab")) {
  b.addEventListener("click", () => {
    document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t === b));
    document.querySelectorAll(".panel").forEach((p) => p.classList.toggle("active", p.id === b.dataset.tab));
    if (b.dataset.tab === "burn") renderTargets();
  });
}

// --- boards ---------------------------------------------------------------------------

async function loadPorts() {
  const r = await api("/api/ports");
  state.ports = r.ports;
  const tbody = $("#ports-table tbody");
  tbody.replaceChildren(...r.ports.map((p) => el("tr", { "data-port": p.port },
    el("td", {}, p.label, p.virtual ? el("div", { class: "hint" }, p.port) : ""), el("td", {}, p.bridge),
    el("td", {}, p.boards.join(", ") || "?"),
    el("td", {}, r.busy.includes(p.port) ? "busy" : "idle"))));
  if (!r.ports.length) tbody.append(el("tr", {}, el("td", { colspan: 4 }, "no board found: plug one in, or add a virtual board")));
  renderTargets();
}

function renderComparePorts() {
  const sel = $("#compare-port");
  const keep = sel.value;
  sel.replaceChildren(...state.ports.map((p) => el("option", { value: p.port }, p.label)));
  if (keep) sel.value = keep;
}

function renderTargets() {
  const box = $("#burn-targets");
  const ticked = new Set([...box.querySelectorAll("input:checked")].map((i) => i.value));
  box.replaceChildren(...state.ports.map((p) => el("label", { class: "target" },
    Object.assign(el("input", { type: "checkbox", value: p.port, class: "target-box" }), { checked: ticked.has(p.port) }),
    " " + p.label + (p.virtual ? "" : " (" + p.bridge + ")"))));
  if (!state.ports.length) box.append("No boards: see the Boards tab.");
}

$("#refresh-ports").addEventListener("click", guarded(loadPorts));
$("#add-virtual").addEventListener("click", guarded(async () => {
  const r = await api("/api/virtual", { method: "POST", body: { board: $("#virtual-board").value } });
  log("added virtual board " + r.port);
  await loadPorts();
}));

// --- plan -----------------------------------------------------------------------------

function planSpec() {
  return {
    board: $("#plan-board").value,
    layout: $("#plan-layout").value,
    items: state.plan.map((it) => ({ file: it.id, address: it.address, prefix: it.prefix, loader: it.loader })),
  };
}

function renderPlanTable() {
  const tbody = $("#plan-table tbody");
  tbody.replaceChildren(...state.plan.map((it, i) => {
    const pkg = it.content.kind === "kfpkg";
    const addr = pkg ? el("span", {}, it.entries.map((e) => hex(e.address) + " " + e.name).join(", "))
      : el("input", { class: "address", value: it.address, size: 11, "data-index": i,
        oninput: (ev) => { it.address = ev.target.value; scheduleCheck(); } });
    const sel = el("select", { class: "prefix", onchange: (ev) => {
      it.prefix = ev.target.value === "" ? null : ev.target.value === "firmware"; scheduleCheck(); } },
      el("option", { value: "" }, "auto"), el("option", { value: "firmware" }, "firmware (sha256Prefix)"),
      el("option", { value: "raw" }, "raw"));
    sel.value = it.prefix === null ? "" : it.prefix ? "firmware" : "raw";
    const loader = el("select", { class: "loader", title: "how the firmware will load this model",
      onchange: (ev) => { it.loader = ev.target.value || null; scheduleCheck(); } },
      el("option", { value: "" }, "loader: not said"), el("option", { value: "kpu.load" }, "kpu.load"),
      el("option", { value: "load_flash" }, "kpu.load_flash"));
    loader.value = it.loader || "";
    return el("tr", { "data-file": it.name },
      el("td", {}, it.name), el("td", {}, size(it.size)), el("td", {}, it.content.label),
      el("td", {}, addr), el("td", {}, pkg ? "as packaged" : sel, it.content.kind === "kmodel" ? loader : ""),
      el("td", {}, el("button", { class: "remove", onclick: guarded(async () => {
        await api("/api/files/" + it.id, { method: "DELETE" });
        state.plan.splice(state.plan.indexOf(it), 1);
        renderPlanTable();
        scheduleCheck();
      }) }, "✕")));
  }));
}

function nextAddress() {
  // a suggestion only: the server checks whatever the user types
  if (!state.plan.length) return "0x000000";
  return "0x" + (0x300000 + 0x100000 * (state.plan.length - 1)).toString(16).toUpperCase();
}

async function addPlanFiles(files) {
  for (const f of files) {
    const r = await upload(f);
    state.plan.push({ ...r, address: nextAddress(), prefix: null, loader: null });
    log("uploaded " + r.name + " (" + r.content.label + ")");
  }
  renderPlanTable();
  await checkPlan();
}

let checkTimer = null;
function scheduleCheck() {
  clearTimeout(checkTimer);
  checkTimer = setTimeout(guarded(checkPlan), 250);
}

// Checks can overlap (a pause in typing longer than the debounce starts one while the
// last is still on its way) and their answers can come back in any order: only the
// newest check may draw, or a stale answer would show the verdict of an address the
// user has already changed.
let checkSeq = 0;

async function checkPlan() {
  const seq = ++checkSeq;
  if (!state.plan.length) {
    $("#findings").replaceChildren();
    $("#map").replaceChildren();
    $("#verdict").textContent = "";
    return;
  }
  let r;
  try {
    r = await api("/api/plan", { method: "POST", body: planSpec() });
  } catch (e) {
    if (seq !== checkSeq) return;
    $("#verdict").textContent = e.message;
    $("#verdict").className = "bad";
    return;
  }
  if (seq !== checkSeq) return;  // a newer check has started: its answer draws
  const p = r.plan;
  const errors = p.findings.filter((f) => f.severity === "error").length;
  const warnings = p.findings.filter((f) => f.severity === "warning").length;
  $("#verdict").textContent = errors ? errors + " error(s): fix them before burning"
    : warnings ? "ok, " + warnings + " warning(s)" : "layout ok";
  $("#verdict").className = errors ? "bad" : warnings ? "warn" : "good";
  $("#findings").replaceChildren(...p.findings.map((f) => el("li", { class: "finding " + f.severity },
    el("b", {}, f.severity + ": "), f.message, f.hint && f.severity !== "info" ? el("div", { class: "hint" }, "hint: " + f.hint) : "")));
  $("#map").innerHTML = r.svg;  // server-made SVG: names are XML-escaped there
  status(errors ? "plan has errors" : "plan checked");
}

const drop = $("#drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", guarded(async (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  await addPlanFiles([...e.dataTransfer.files]);
}));
$("#plan-files").addEventListener("change", guarded(async (e) => {
  await addPlanFiles([...e.target.files]);
  e.target.value = "";
}));
$("#plan-board").addEventListener("change", scheduleCheck);
$("#plan-layout").addEventListener("change", scheduleCheck);
$("#download-kfpkg").addEventListener("click", guarded(async () => {
  const resp = await api("/api/plan/kfpkg", { method: "POST", body: planSpec(), raw: true });
  await saveBlob(resp, "plan.kfpkg");
  status("kfpkg downloaded");
}));
$("#download-image").addEventListener("click", guarded(async () => {
  const resp = await api("/api/plan/image", { method: "POST", body: planSpec(), raw: true });
  await saveBlob(resp, "flash.bin");
  status("merged flash image downloaded");
}));

// --- burn -----------------------------------------------------------------------------

function card(port) {
  let c = document.querySelector(`.board-card[data-port="${CSS.escape(port)}"]`);
  if (!c) {
    c = el("div", { class: "board-card", "data-port": port },
      el("div", { class: "board-name" }, (state.ports.find((p) => p.port === port) || { label: port }).label),
      el("progress", { max: 1, value: 0 }),
      el("div", { class: "board-stage" }, "waiting"),
      el("div", { class: "board-status" }, ""));
    $("#board-cards").append(c);
  }
  return c;
}

function onEvent(ev) {
  if (ev.kind === "end") {
    status(ev.ok ? "all boards burned and verified" : "some boards failed", !ev.ok);
    log(ev.ok ? "job finished: all ok" : "job finished with failures");
    $("#burn-btn").disabled = false;
    $("#cancel-btn").disabled = true;
    loadPorts();
    return;
  }
  const c = card(ev.port);
  const name = c.querySelector(".board-name").textContent;
  if (ev.kind === "progress") {
    const bar = c.querySelector("progress");
    if (ev.total) { bar.max = ev.total; bar.value = ev.done; }
    c.querySelector(".board-stage").textContent = ev.stage + (ev.label ? " " + ev.label : "")
      + (ev.total ? " " + Math.floor(100 * ev.done / ev.total) + "%" : "");
    if (ev.message) log(name + ": " + ev.message);
  } else if (ev.kind === "log") {
    c.querySelector(".board-stage").textContent = ev.message;
    log(name + ": " + ev.message);
  } else if (ev.kind === "done" || ev.kind === "failed") {
    const st = c.querySelector(".board-status");
    if (ev.error) {
      st.textContent = "FAILED: " + ev.error.message;
    } else {
      const v = ev.verify;
      st.textContent = v ? (v.ok ? "verified ✓" : "VERIFY FAILED") : "burned (" + ev.verification + ")";
      c.querySelector(".board-stage").textContent = ev.regions.length + " region(s), " + ev.seconds + " s at " + ev.baud + " baud";
      const bar = c.querySelector("progress");
      bar.value = bar.max;
    }
    c.classList.add(ev.kind === "done" ? "ok" : "failed");
    log(name + ": " + st.textContent);
  }
}

$("#burn-btn").addEventListener("click", guarded(async () => {
  const ports = [...document.querySelectorAll(".target-box:checked")].map((i) => i.value);
  const r = await api("/api/burn", { method: "POST",
    body: { ...planSpec(), ports, verify: $("#burn-verify").checked, force: $("#burn-force").checked } });
  state.job = r.job;
  $("#board-cards").replaceChildren();
  r.ports.forEach(card);
  $("#burn-btn").disabled = true;
  $("#cancel-btn").disabled = false;
  status("burning " + r.ports.length + " board(s)");
  log("job " + r.job + ": burning " + r.ports.length + " board(s)");
  const es = new EventSource(`/api/jobs/${r.job}/events?token=${encodeURIComponent(TOKEN)}`);
  for (const kind of ["progress", "log", "done", "failed", "end"]) {
    es.addEventListener(kind, (m) => {
      const ev = JSON.parse(m.data);
      onEvent(ev);
      if (kind === "end") es.close();
    });
  }
}));
$("#cancel-btn").addEventListener("click", guarded(async () => {
  if (state.job) await api(`/api/jobs/${state.job}/cancel`, { method: "POST" });
  log("cancel requested");
}));

// --- models ---------------------------------------------------------------------------

function table(headers, rows, cls = "") {
  return el("table", { class: cls }, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c ?? ""))))));
}

function renderModelInfo(info) {
  const fmt = info.format;
  const parts = [el("p", {}, `${info.file}: ${fmt.kind} V${fmt.version ?? "?"} (${fmt.producer || ""}), ${size(info.size)}`)];
  if (info.inputs) {
    parts.push(table(["tensor", "name", "shape", "dtype"], [
      ...info.inputs.map((t) => ["input", t.name, t.shape.join("×"), t.dtype]),
      ...info.outputs.map((t) => ["output", t.name, t.shape.join("×"), t.dtype])]));
  }
  if (info.memory) {
    parts.push(table(["memory", "bytes"], Object.entries(info.memory).map(([k, v]) => [k, typeof v === "number" ? v.toLocaleString() : JSON.stringify(v)]), "memory"));
  }
  parts.push(el("h4", {}, "Which firmwares load it"));
  parts.push(table(["firmware", "loads", "why"], info.firmwares.map((f) => [f.firmware, f.loads, f.why]), "firmwares"));
  if (info.layers) {
    const keys = Object.keys(info.layers[0] || {}).filter((k) => typeof info.layers[0][k] !== "object");
    parts.push(el("h4", {}, info.layers.length + " layers"));
    parts.push(table(keys, info.layers.map((l) => keys.map((k) => l[k])), "layers"));
  }
  for (const n of info.notes || []) parts.push(el("p", { class: "hint" }, n));
  $("#model-info").replaceChildren(...parts);
}

$("#model-file").addEventListener("change", guarded(async (e) => {
  const f = e.target.files[0];
  if (!f) return;
  state.model = await upload(f);
  $("#model-name").textContent = state.model.name;
  renderModelInfo(await api("/api/model/info", { method: "POST", body: { file: state.model.id } }));
  $("#prep-btn").disabled = $("#seal-btn").disabled = $("#compare-btn").disabled = false;
  $("#run-btn").disabled = !state.image;
}));
$("#image-file").addEventListener("change", guarded(async (e) => {
  const f = e.target.files[0];
  if (!f) return;
  state.image = await upload(f);
  $("#image-name").textContent = state.image.name;
  $("#run-btn").disabled = !state.model;
}));

async function downloadFile(id, name) {
  const resp = await api(`/api/files/${id}/download`, { raw: true });
  await saveBlob(resp, name);
}

$("#prep-btn").addEventListener("click", guarded(async () => {
  const r = await api("/api/model/prep", { method: "POST", body: { file: state.model.id } });
  await downloadFile(r.file, r.name);
  status(`${r.name}: load it with kpu.load_flash (batch ${r.prep.batch_size})`);
}));
$("#seal-btn").addEventListener("click", guarded(async () => {
  const r = await api("/api/model/seal", { method: "POST", body: { file: state.model.id, key_hex: $("#seal-key").value } });
  if (r.key_hex) {
    $("#seal-key").value = r.key_hex;
    status("sealed with a NEW key (shown in the key field): keep it, the board needs it");
  } else status("sealed, key id " + r.key_id);
  await downloadFile(r.file, r.name);
}));

$("#run-btn").addEventListener("click", guarded(async () => {
  status("running on the host…");
  const r = await api("/api/model/run", { method: "POST", body: {
    model: state.model.id, image: state.image.id, resize: $("#run-resize").checked,
    threshold: parseFloat($("#run-threshold").value) } });
  const parts = [];
  const img = el("img", { id: r.boxes_png ? "boxes-img" : "input-img", alt: "input",
    src: "data:image/png;base64," + (r.boxes_png || r.image_png) });
  parts.push(img);
  if (r.detections) {
    parts.push(el("h4", {}, r.detections.length + " detection(s)"));
    parts.push(el("ul", { id: "detections" }, ...r.detections.map((d) =>
      el("li", { class: "detection" }, `${d.class} ${d.score.toFixed(2)} at (${d.x.toFixed(2)}, ${d.y.toFixed(2)}) ${d.w.toFixed(2)}×${d.h.toFixed(2)}`))));
  }
  for (const o of r.outputs) {
    parts.push(el("p", {}, `${o.name}: ${o.shape.join("×")}`));
    if (o.top) parts.push(table(["rank", "class index", "value"], o.top.map((t, i) => [i + 1, t.index, t.value.toPrecision(6)]), "topk"));
  }
  $("#run-result").replaceChildren(...parts);
  status(r.detections ? r.detections.length + " detection(s)" : "done");
}));

$("#compare-btn").addEventListener("click", guarded(async () => {
  status("comparing on the board…");
  const r = await api("/api/model/compare", { method: "POST", body: {
    model: state.model.id, image: state.image ? state.image.id : null, port: $("#compare-port").value,
    address: $("#compare-address").value, load_flash: $("#compare-load-flash").checked } });
  $("#compare-result").replaceChildren(
    el("p", { class: r.passed ? "good" : "bad", id: "compare-verdict" },
      (r.passed ? "board and host agree" : "board and host DIFFER") + ` (${r.load}, input ${r.input})`),
    table(["output", "shape", "dtype", "mismatches", "max |diff|", "result"], r.outputs.map((o) =>
      [o.index, o.shape.join("×"), o.dtype, o.mismatches + " / " + o.elements, o.max_abs ?? o.problem, o.passed ? "ok" : "DIFFERS"])),
    ...r.notes.map((n) => el("p", { class: "hint" }, n)));
  status(r.passed ? "compare passed" : "compare found differences", !r.passed);
}));

// --- start ----------------------------------------------------------------------------

(guarded(async () => {
  if (!TOKEN) { status("no session token in the URL: open the URL kflashpy gui printed", true); return; }
  const m = await api("/api/meta");
  state.meta = m;
  $("#plan-board").replaceChildren(...m.boards.map((b) => el("option", { value: b.id }, b.name)));
  $("#virtual-board").replaceChildren(...m.boards.map((b) => el("option", { value: b.id }, b.id)));
  $("#virtual-board").value = "maix-bit";
  $("#plan-board").value = "generic";
  $("#plan-layout").append(...m.layouts.map((l) => el("option", { value: l.id }, l.name)));
  await loadPorts();
  status("ready");
}))();
