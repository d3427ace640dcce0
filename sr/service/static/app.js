// sr web page: pick an image, upscale it through POST /v1/upscale, compare before/after.
// Plain JS, no build step. Errors from the API are shown with their `detail`.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  file: null,         // the chosen File
  fileError: "",      // why the server refused the chosen file already (its preview), or ""
  beforeUrl: null,    // object URL of the original
  afterUrl: null,     // object URL of the result
  budgetUrl: null,    // object URL of the budget heat map for the current result
  budgetId: null,     // X-Budget-Map-Id of the current result: its map, kept by the server
  request: null,      // the form fields that produced the current result
  families: [],       // [{name, scales, default, denoise, look, description?, architecture?...}]
  pre: [],            // 1x restoration models (the server's models folder): the pre= choices
  models: [],         // catalogue entries
  modelsError: "",    // why the model list could not be loaded (e.g. the server needs a key)
  beforeNote: "",     // how "before" was obtained, or why it cannot be shown
  budgetMax: "",      // X-Budget-Max of the current budget map: the legend's top value
  busy: false,
  actual: false,      // view: 1:1 pixels (true) or fit the card (false)
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
  $("upscale").disabled = busy || !state.file || !state.families.length || Boolean(state.fileError);
  $("budget-toggle").disabled = busy;
  if (text !== undefined) $("status").textContent = text;
  if (busy) $("progress-row").hidden = false;
  updateHint();
}

// Says why Upscale is disabled (a disabled button alone explains nothing).
function updateHint() {
  let hint = "";
  if (!state.families.length) {
    hint = state.modelsError
      ? `No models: ${state.modelsError}`
      : "Loading the model list…";
  } else if (!state.file) {
    hint = "Choose an image to upscale.";
  } else if (state.fileError) {
    hint = "The server cannot read this file (see the error): choose another image.";
  }
  $("hint").textContent = hint;
}

// JPEG/WebP quality matters when the result is saved as JPEG or WebP, also via "same as input".
function updateQuality() {
  const fmt = $("format").value;
  const type = state.file ? state.file.type : "";
  const lossy = ["jpg", "webp"].includes(fmt) || (fmt === "same" && ["image/jpeg", "image/webp"].includes(type));
  $("quality").disabled = !lossy;
}

// --- models -----------------------------------------------------------------------------------
async function loadModels() {
  const res = await fetch("/v1/models", { headers: apiHeaders() });
  const body = await res.text();
  if (!res.ok) {
    state.families = [];
    state.models = [];
    state.pre = [];
    fillPre();
    $("model").innerHTML = "";
    $("scale").innerHTML = "";
    updateDenoise();
    state.modelsError = res.status === 401
      ? ($("api-key").value.trim() ? "the API key is wrong. Check it below."
        : "this server needs an API key. Enter it below.")
      : detailText(res.status, body);
    if (res.status === 401) $("key-box").open = true;
    showError(res.status === 401 ? "" : state.modelsError);
    setBusy(false);
    return;
  }
  state.modelsError = "";
  const data = JSON.parse(body);
  state.families = data.families;
  state.models = data.models;
  state.pre = data.pre || [];
  fillPre();
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

// The models folder's 1x restoration models, offered as "Restore first" (hidden when there are none).
function fillPre() {
  const sel = $("pre");
  const previous = sel.value;
  sel.innerHTML = "";
  sel.add(new Option("none", ""));
  for (const m of state.pre) {
    sel.add(new Option(`${m.name} (${m.architecture})`, m.name));
  }
  if ([...sel.options].some((o) => o.value === previous)) sel.value = previous;
  $("pre-row").hidden = !state.pre.length;
}

function currentFamily() {
  return state.families.find((f) => f.name === $("model").value);
}

function fillScales() {
  const fam = currentFamily();
  const sel = $("scale");
  const previous = sel.value;
  sel.innerHTML = "";
  for (const s of fam ? fam.scales : []) sel.add(new Option(`×${s}`, String(s)));
  if ([...sel.options].some((o) => o.value === previous)) sel.value = previous;
  updateDenoise();
  describeModel();
}

// The denoise and look sliders apply to the models that take them (photo, auto: `denoise` and
// `look` in /v1/models; look only where the server has photo-natural).
function updateDenoise() {
  const fam = currentFamily();
  const takes = { denoise: Boolean(fam && fam.denoise), look: Boolean(fam && fam.look) };
  for (const [name, on] of Object.entries(takes)) {
    $(name).disabled = !on;
    $(`${name}-row`).hidden = !on;
    $(`${name}-value`).textContent = Number($(name).value).toFixed(2);
  }
}

function describeModel() {
  const name = $("model").value;
  const scale = Number($("scale").value);
  const entry = state.models.find((m) => m.family === name && Number(m.scale) === scale);
  const fam = currentFamily();
  if (!entry) { $("model-info").textContent = fam && fam.description ? fam.description : ""; return; }
  const parts = [entry.name];
  if (entry.architecture) parts.push(entry.architecture);
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
  state.fileError = "";
  if (state.beforeUrl) URL.revokeObjectURL(state.beforeUrl);
  state.beforeUrl = URL.createObjectURL(file);
  state.beforeNote = "";
  $("result").hidden = true; // the old result belongs to the previous file
  $("progress-row").hidden = true;
  $("file-info").textContent = `${file.name} · ${formatBytes(file.size)}`;
  const probe = new Image();
  probe.onload = () => {
    $("file-info").textContent = `${file.name} · ${probe.naturalWidth}×${probe.naturalHeight} · `
      + formatBytes(file.size);
  };
  // The browser cannot show this format (TIFF, PPM...): ask the server for its decoded PNG.
  probe.onerror = () => { if (state.file === file) loadPreview(file); };
  probe.src = state.beforeUrl;
  showError("");
  updateQuality();
  setBusy(false);
}

async function loadPreview(file) {
  const form = new FormData();
  form.append("file", file, file.name);
  let res;
  try {
    res = await fetch("/v1/preview", { method: "POST", body: form, headers: apiHeaders() });
  } catch (_) {
    res = null;
  }
  if (state.file !== file) return; // another file was chosen meanwhile
  if (!res || !res.ok) {
    const text = res ? await res.text() : "";
    state.beforeUrl = null;
    state.beforeNote = "The original cannot be shown in the browser"
      + (res ? ` (${detailText(res.status, text)})` : "") + ": only the result is displayed.";
    if (res && res.status !== 401) showError(detailText(res.status, text));
    // The server refused the file itself (not the key, not a busy or failing server): the same
    // upload would be refused again, so Upscale stays off until another file is chosen.
    if (res && res.status >= 400 && res.status < 500 && ![401, 408, 429].includes(res.status)) {
      state.fileError = detailText(res.status, text);
      setBusy(false);
    }
    return;
  }
  const blob = await res.blob();
  if (state.beforeUrl) URL.revokeObjectURL(state.beforeUrl);
  state.beforeUrl = URL.createObjectURL(blob);
  state.beforeNote = "Your browser cannot display this format: \"before\" is the server's decoding of it.";
  const size = res.headers.get("X-Image-Size");
  $("file-info").textContent = `${file.name} · ${size ? size.replace("x", "×") + " · " : ""}`
    + `${formatBytes(file.size)} · shown as decoded by the server`;
  if (!$("result").hidden) showBefore();
}

// --- upscale ----------------------------------------------------------------------------------
function currentFields() {
  const fields = { model: $("model").value, scale: $("scale").value, format: $("format").value,
                   quality: $("quality").value, tta: $("tta").checked ? "true" : "false",
                   keep_budget_map: "true" };  // the overlay then needs no second upscale
  if (!$("denoise").disabled) fields.denoise = $("denoise").value;
  if (!$("look").disabled) fields.look = $("look").value;
  if ($("pre").value) fields.pre = $("pre").value;
  return fields;
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
    state.budgetId = xhr.getResponseHeader("X-Budget-Map-Id");
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
      showBefore();
      $("budget-toggle").checked = false;
      $("budget").hidden = true;
      $("legend").hidden = true;
      $("result").hidden = false;
      // 1:1 when the result fits the card, else fit; the toggle switches.
      setView(w <= $("viewport").clientWidth);
      const link = $("download");
      link.href = state.afterUrl;
      link.download = filenameOf(xhr, "upscaled.png");
      $("info").textContent = [`${w}×${h}`, xhr.getResponseHeader("X-Model"),
        xhr.getResponseHeader("X-Model-Choice"), formatBytes(blob.size)].filter(Boolean).join(" · ");
      setSlider($("slider").value);
      resolve();
    };
    after.src = state.afterUrl;
  });
}

function showBefore() {
  const before = $("before");
  const note = $("before-note");
  if (state.beforeUrl) {
    before.src = state.beforeUrl;
    before.hidden = false;
  } else {
    before.removeAttribute("src");
    before.hidden = true; // never let the slider compare the result with itself
  }
  $("slider").disabled = !state.beforeUrl;
  note.textContent = state.beforeNote;
  note.hidden = !state.beforeNote;
}

function setSlider(value) {
  $("slider").value = String(value);
  $("before").style.clipPath = `inset(0 ${100 - value}% 0 0)`;
  $("divider").style.left = `${value}%`;
}

function setView(actual) {
  state.actual = actual;
  const compare = $("compare");
  compare.classList.toggle("actual", actual);
  compare.style.width = actual ? `${$("after").naturalWidth}px` : "";
  $("view-toggle").setAttribute("aria-pressed", actual ? "true" : "false");
  $("view-fit").setAttribute("aria-pressed", actual ? "false" : "true");
}

// Drag anywhere on the image to move the divider.
function dragDivider(e) {
  const r = $("compare").getBoundingClientRect();
  const pct = Math.min(100, Math.max(0, ((e.clientX - r.left) / r.width) * 100));
  if (state.beforeUrl) setSlider(Math.round(pct * 10) / 10);
}

const LOUPE_ZOOM = 4; // screen pixels per image pixel inside the loupe

function moveLoupe(e) {
  const loupe = $("loupe");
  if (!$("loupe-toggle").checked) { loupe.hidden = true; return; }
  const after = $("after");
  const r = $("compare").getBoundingClientRect();
  const x = e.clientX - r.left, y = e.clientY - r.top;
  if (x < 0 || y < 0 || x > r.width || y > r.height) { loupe.hidden = true; return; }
  const ix = (x / r.width) * after.naturalWidth, iy = (y / r.height) * after.naturalHeight;
  const showBeforeSide = state.beforeUrl && (x / r.width) * 100 < Number($("slider").value);
  const layers = [showBeforeSide ? state.beforeUrl : state.afterUrl];
  if (!$("budget").hidden && state.budgetUrl) layers.unshift(state.budgetUrl);
  const size = `${after.naturalWidth * LOUPE_ZOOM}px ${after.naturalHeight * LOUPE_ZOOM}px`;
  const half = loupe.offsetWidth / 2 || 90;
  const pos = `${half - ix * LOUPE_ZOOM}px ${half - iy * LOUPE_ZOOM}px`;
  loupe.style.backgroundImage = layers.map((u) => `url("${u}")`).join(", ");
  loupe.style.backgroundSize = layers.map(() => size).join(", ");
  loupe.style.backgroundPosition = layers.map(() => pos).join(", ");
  loupe.style.left = `${e.clientX}px`; // position: fixed, so it never makes the viewport scroll
  loupe.style.top = `${e.clientY}px`;
  loupe.dataset.side = showBeforeSide ? "before" : "after";
  loupe.hidden = false;
}

// The current result's budget map: the one the server kept with it, else (dropped for newer ones,
// or an older server) a second upscale that returns the map.
async function budgetMap() {
  if (state.budgetId) {
    const res = await fetch(`/v1/budget-maps/${encodeURIComponent(state.budgetId)}`, { headers: apiHeaders() });
    if (res.ok) return { blob: await res.blob(), max: res.headers.get("X-Budget-Max") };
  }
  const { blob, xhr } = await post(state.request, { budget_map: "true", format: "png" });
  return { blob, max: xhr.getResponseHeader("X-Budget-Max") };
}

async function toggleBudget() {
  const on = $("budget-toggle").checked;
  if (!on) { $("budget").hidden = true; $("legend").hidden = true; return; }
  if (!state.budgetUrl) {
    showError("");
    setBusy(true, "Computing the attention budget map…");
    try {
      const { blob, max } = await budgetMap();
      state.budgetUrl = URL.createObjectURL(blob);
      state.budgetMax = max || "max";
      setBusy(false, "Attention budget map shown.");
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
  $("legend-max").textContent = state.budgetMax;
  $("legend").hidden = false;
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
  $("denoise").addEventListener("input", updateDenoise);
  $("look").addEventListener("input", updateDenoise);
  $("format").addEventListener("change", updateQuality);
  $("upscale").addEventListener("click", upscale);
  $("slider").addEventListener("input", (e) => setSlider(Number(e.target.value)));
  $("budget-toggle").addEventListener("change", toggleBudget);
  $("view-toggle").addEventListener("click", () => setView(true));
  $("view-fit").addEventListener("click", () => setView(false));
  $("before-mode").addEventListener("change", (e) => {
    $("compare").classList.toggle("before-pixels", e.target.value === "pixels");
  });
  $("loupe-toggle").addEventListener("change", () => { $("loupe").hidden = true; });
  const compare = $("compare");
  compare.addEventListener("pointerdown", (e) => {
    compare.setPointerCapture(e.pointerId);
    dragDivider(e);
  });
  compare.addEventListener("pointermove", (e) => {
    if (compare.hasPointerCapture(e.pointerId)) dragDivider(e);
    moveLoupe(e);
  });
  compare.addEventListener("pointerleave", () => { $("loupe").hidden = true; });
  // The key applies as it is typed (after a short pause), not only when the field loses focus.
  let keyTimer = null;
  $("api-key").addEventListener("input", () => {
    clearTimeout(keyTimer);
    keyTimer = setTimeout(() => loadModels().catch((err) => showError(err.message)), 300);
  });
  checkReady();
  updateHint();
  loadModels().catch((err) => showError(`Could not load the model list: ${err.message}`));
}

document.addEventListener("DOMContentLoaded", init);
