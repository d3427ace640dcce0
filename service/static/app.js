// sr web page: pick an image, upscale it through POST /v1/upscale, compare before/after.
// Plain JS, no build step. Errors from the API are shown with their `detail`.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  file: null,         // the chosen File
  beforeUrl: null,    // object URL of the original
  afterUrl: null,     // object URL of the result
  budgetUrl: null,    // object URL of the budget heat map for the current result
  request: null,      // the form fields that produced the current result
  families: [],       // [{name, scales, default}]
  models: [],         // catalogue entries
  busy: false,
};

function apiHeaders() {
  const key = $("api-key").value.trim();
  return key ? { "X-API-Key": key } : {};
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
  if (message && /API key/i.test(message)) $("key-box").open = true;
}

// FastAPI errors: {"detail": "text"} or {"detail": [{loc, msg}, ...]}.
function detailText(status, body) {
  let detail = null;
  try { detail = JSON.parse(body).detail; } catch (_) { /* not JSON */ }
  if (Array.isArray(detail)) {
    detail = detail.map((e) => `${(e.loc || []).filter((p) => p !== "body").join(".")}: ${e.msg}`).join("; ");
  }
  return `Error ${status}: ${detail || body || "the server did not answer"}`;
}

function setBusy(busy, text) {
  state.busy = busy;
  $("main").setAttribute("aria-busy", busy ? "true" : "false");
  $("upscale").disabled = busy || !state.file || !state.families.length;
  $("budget-toggle").disabled = busy;
  if (text !== undefined) $("status").textContent = text;
  if (busy) $("progress-row").hidden = false;
}

// --- models -----------------------------------------------------------------------------------
async function loadModels() {
  const res = await fetch("/v1/models", { headers: apiHeaders() });
  const body = await res.text();
  if (!res.ok) { showError(detailText(res.status, body)); return; }
  const data = JSON.parse(body);
  state.families = data.families;
  state.models = data.models;
  const sel = $("model");
  sel.innerHTML = "";
  for (const fam of data.families) {
    const opt = new Option(fam.name, fam.name, fam.default, fam.default);
    sel.add(opt);
  }
  fillScales();
  showError("");
  setBusy(false);
}

function fillScales() {
  const fam = state.families.find((f) => f.name === $("model").value);
  const sel = $("scale");
  const previous = sel.value;
  sel.innerHTML = "";
  for (const s of fam ? fam.scales : []) sel.add(new Option(`×${s}`, String(s)));
  if ([...sel.options].some((o) => o.value === previous)) sel.value = previous;
  describeModel();
}

function describeModel() {
  const name = $("model").value;
  const scale = Number($("scale").value);
  const entry = state.models.find((m) => m.family === name && Number(m.scale) === scale);
  if (!entry) { $("model-info").textContent = ""; return; }
  const parts = [entry.name];
  if (entry.params) parts.push(`${(entry.params / 1000).toFixed(0)}k parameters`);
  if (entry.set5_psnr != null) parts.push(`Set5 PSNR ${Number(entry.set5_psnr).toFixed(2)} dB`);
  $("model-info").textContent = parts.join(" · ");
}

async function checkReady() {
  const pill = $("server-state");
  try {
    const res = await fetch("/readyz");
    const data = await res.json();
    if (res.ok) {
      pill.textContent = `ready · ${data.model} on ${data.device}`;
      pill.className = "pill ok";
      return;
    }
    pill.textContent = data.detail || "not ready";
    pill.className = "pill bad";
  } catch (_) {
    pill.textContent = "server unreachable";
    pill.className = "pill bad";
  }
  setTimeout(checkReady, 2000);
}

// --- input ------------------------------------------------------------------------------------
function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function chooseFile(file) {
  if (!file) return;
  state.file = file;
  if (state.beforeUrl) URL.revokeObjectURL(state.beforeUrl);
  state.beforeUrl = URL.createObjectURL(file);
  $("result").hidden = true; // the old result belongs to the previous file
  $("progress-row").hidden = true;
  $("file-info").textContent = `${file.name} · ${formatBytes(file.size)}`;
  const probe = new Image();
  probe.onload = () => {
    $("file-info").textContent = `${file.name} · ${probe.naturalWidth}×${probe.naturalHeight} · `
      + formatBytes(file.size);
  };
  probe.src = state.beforeUrl;
  showError("");
  setBusy(false);
}

// --- upscale ----------------------------------------------------------------------------------
function currentFields() {
  return { model: $("model").value, scale: $("scale").value, format: $("format").value,
           quality: $("quality").value, tta: $("tta").checked ? "true" : "false" };
}

// POST the file with `fields`; resolves {blob, xhr}, rejects with a readable message.
function post(fields, extra) {
  return new Promise((resolve, reject) => {
    const form = new FormData();
    form.append("file", state.file, state.file.name);
    for (const [k, v] of Object.entries({ ...fields, ...extra })) form.append(k, v);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/upscale");
    for (const [k, v] of Object.entries(apiHeaders())) xhr.setRequestHeader(k, v);
    xhr.responseType = "blob";
    const bar = $("progress");
    bar.value = 0;
    xhr.upload.onprogress = (e) => {
      if (!e.lengthComputable) return;
      const pct = Math.round((100 * e.loaded) / e.total);
      bar.value = pct;
      $("status").textContent = `Uploading… ${pct}%`;
    };
    xhr.upload.onload = () => {
      bar.removeAttribute("value"); // indeterminate while the server works
      $("status").textContent = "Upscaling on the server…";
    };
    xhr.onerror = () => reject(new Error("Network error: the server could not be reached."));
    xhr.onload = async () => {
      if (xhr.status === 200) { resolve({ blob: xhr.response, xhr }); return; }
      const text = xhr.response ? await xhr.response.text() : "";
      reject(new Error(detailText(xhr.status, text)));
    };
    xhr.send(form);
  });
}

function filenameOf(xhr, fallback) {
  const cd = xhr.getResponseHeader("Content-Disposition") || "";
  const m = /filename="([^"]+)"/.exec(cd);
  return m ? m[1] : fallback;
}

function timingText(xhr) {
  const st = xhr.getResponseHeader("Server-Timing") || "";
  const ms = Object.fromEntries(st.split(",").map((p) => {
    const m = /\s*([\w-]+);dur=([\d.]+)/.exec(p);
    return m ? [m[1], Number(m[2])] : [p, 0];
  }));
  return ms.total ? `server ${(ms.total / 1000).toFixed(2)} s (model ${(ms.upscale / 1000).toFixed(2)} s)` : "";
}

async function upscale() {
  if (!state.file || state.busy) return;
  showError("");
  setBusy(true, "Uploading…");
  const fields = currentFields();
  try {
    const { blob, xhr } = await post(fields, {});
    if (state.afterUrl) URL.revokeObjectURL(state.afterUrl);
    if (state.budgetUrl) URL.revokeObjectURL(state.budgetUrl);
    state.afterUrl = URL.createObjectURL(blob);
    state.budgetUrl = null;
    state.request = fields;
    await showResult(xhr, blob);
    setBusy(false, `Done: ${timingText(xhr)}`);
    $("progress").value = 100;
  } catch (err) {
    setBusy(false, "Failed.");
    $("progress").value = 0;
    showError(err.message);
  }
}

function showResult(xhr, blob) {
  return new Promise((resolve) => {
    const after = $("after");
    after.onload = () => {
      const w = after.naturalWidth, h = after.naturalHeight;
      after.dataset.width = String(w);
      after.dataset.height = String(h);
      $("before").src = state.beforeUrl;
      $("budget-toggle").checked = false;
      $("budget").hidden = true;
      $("result").hidden = false;
      const link = $("download");
      link.href = state.afterUrl;
      link.download = filenameOf(xhr, "upscaled.png");
      $("info").textContent = [`${w}×${h}`, xhr.getResponseHeader("X-Model"),
        formatBytes(blob.size)].filter(Boolean).join(" · ");
      setSlider($("slider").value);
      resolve();
    };
    after.src = state.afterUrl;
  });
}

function setSlider(value) {
  $("before").style.clipPath = `inset(0 ${100 - value}% 0 0)`;
  $("divider").style.left = `${value}%`;
}

async function toggleBudget() {
  const on = $("budget-toggle").checked;
  if (!on) { $("budget").hidden = true; return; }
  if (!state.budgetUrl) {
    showError("");
    setBusy(true, "Computing the attention budget map…");
    try {
      const { blob, xhr } = await post(state.request, { budget_map: "true", format: "png" });
      state.budgetUrl = URL.createObjectURL(blob);
      const top = xhr.getResponseHeader("X-Budget-Max");
      setBusy(false, `Attention budget: black = 0 key regions per pixel, pale yellow = ${top || "the most"}.`);
      $("progress").value = 100;
    } catch (err) {
      setBusy(false, "Failed.");
      $("progress").value = 0;
      $("budget-toggle").checked = false;
      showError(err.message);
      return;
    }
  }
  $("budget").src = state.budgetUrl;
  $("budget").hidden = false;
}

// --- wiring -----------------------------------------------------------------------------------
function init() {
  const zone = $("dropzone");
  $("file").addEventListener("change", (e) => chooseFile(e.target.files[0]));
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    chooseFile(e.dataTransfer.files[0]);
  });
  $("model").addEventListener("change", fillScales);
  $("scale").addEventListener("change", describeModel);
  $("format").addEventListener("change", () => {
    $("quality").disabled = !["jpg", "webp"].includes($("format").value);
  });
  $("upscale").addEventListener("click", upscale);
  $("slider").addEventListener("input", (e) => setSlider(e.target.value));
  $("budget-toggle").addEventListener("change", toggleBudget);
  $("api-key").addEventListener("change", loadModels);
  checkReady();
  loadModels().catch((err) => showError(`Could not load the model list: ${err.message}`));
}

document.addEventListener("DOMContentLoaded", init);
