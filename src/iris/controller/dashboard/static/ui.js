// Small shared pieces: building elements (always as text, never as HTML), formatting times, sizes
// and states, and the free/total meter that the Backends and Peers pages both draw.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") node.style.cssText = value; // CSSOM: allowed by the CSP, unlike style="…"
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const TERMINAL = new Set(["SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"]);
export const STATES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"];

export function stateBadge(state) {
  return el("span", { class: `state state-${(state || "unknown").toLowerCase()}` }, state || "?");
}

export function jobLink(jobId) {
  return el("a", { href: `#/job/${encodeURIComponent(jobId)}`, class: "job-link" }, jobId);
}

export function num(value) {
  return Number(value || 0);
}

// "3s", "5m", "2h", "4d": how long ago an epoch-millisecond time was.
export function age(ms) {
  const t = num(ms);
  if (!t) return "";
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

// "45s", "30m", "2h30m", "1d2h": a length of time given in seconds, such as a job's time limit.
export function span(seconds) {
  const s = Math.round(num(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 ? `${s % 60}s` : ""}`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${s % 3600 >= 60 ? `${Math.floor((s % 3600) / 60)}m` : ""}`;
  return `${Math.floor(s / 86400)}d${s % 86400 >= 3600 ? `${Math.floor((s % 86400) / 3600)}h` : ""}`;
}

export function ago(ms) {
  return num(ms) ? `${age(ms)} ago` : "never";
}

// "2026-12-07 14:05:09", local time, as the CLI prints it.
export function clock(ms) {
  const t = num(ms);
  if (!t) return "";
  const d = new Date(t);
  const two = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

export function bytes(value) {
  const n = num(value);
  if (!n) return "0";
  const units = ["B", "K", "M", "G", "T"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v % 1 ? v.toFixed(1) : v}${units[i]}`;
}

export function amount(v) {
  const n = num(v);
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

// "2 RUNNING · 1 PENDING", in the order a task moves through its states.
export function taskCounts(counts) {
  const order = ["RUNNING", "BUILDING", "ASSIGNED", "PENDING", "SUCCEEDED", "FAILED", "KILLED",
    "WORKER_FAILED", "PREEMPTED", "UNSCHEDULABLE"];
  const entries = Object.entries(counts || {}).filter(([, n]) => n > 0);
  entries.sort((a, b) => order.indexOf(a[0]) - order.indexOf(b[0]));
  return entries.map(([s, n]) => `${n} ${s}`).join(" · ");
}

// A job's TASKS cell. A job with no task row (refused at submit, stopped before it was placed, or
// waiting for a peer to take it) would show an empty cell, which reads as a page still loading; it
// says instead how many tasks it asked for and that none exists, and why on hover.
export function jobTasks(job) {
  const counts = taskCounts(job.taskCounts);
  if (counts) return counts;
  const n = job.replicas || 1;
  const ended = TERMINAL.has(job.state);
  const why = ended
    ? `No task was created: the job ended ${job.state} before it was placed`
    : "No task yet: a job's tasks are created when it is placed (here, or on a peer that takes it)";
  return el("span", { class: "no-tasks muted", title: why }, `— none of ${n} created${ended ? "" : " yet"}`);
}

const BAND_ORDER = ["production", "interactive", "batch"];

// One device token's meter: a bar split into what each band holds and what is free, with the
// numbers written out beside it ("h100: 8 free / 16 total").
export function meter(token, free, total, heldByBand = []) {
  const t = num(total);
  const f = num(free);
  const bar = el("div", { class: "meter-bar", role: "img", "aria-label": `${token} ${amount(f)} free of ${amount(t)}` });
  const held = [];
  for (const band of [...heldByBand].sort((a, b) => BAND_ORDER.indexOf(a.band) - BAND_ORDER.indexOf(b.band))) {
    const n = num((band.amounts || {})[token]);
    if (n > 0) held.push([band.band, n]);
  }
  const heldSum = held.reduce((s, [, n]) => s + n, 0);
  if (t > 0) {
    for (const [band, n] of held) {
      bar.append(el("span", { class: `seg band-${band}`, style: `width:${(100 * n) / t}%`, title: `${band} holds ${amount(n)}` }));
    }
    const other = Math.max(0, t - f - heldSum);
    if (other > 0) bar.append(el("span", { class: "seg used", style: `width:${(100 * other) / t}%`, title: `used ${amount(other)}` }));
    bar.append(el("span", { class: "seg free", style: `width:${(100 * f) / t}%`, title: `${amount(f)} free` }));
  }
  const legend = held.length ? ` — held: ${held.map(([b, n]) => `${b} ${amount(n)}`).join(", ")}` : "";
  return el(
    "div",
    { class: "meter", dataset: { token } },
    el("span", { class: "meter-label" }, `${token}: `, el("b", { class: "meter-free" }, `${amount(f)} free / ${amount(t)} total`), legend),
    bar,
  );
}

// The meters of one backend's availability block, one per device token it reports.
export function availabilityMeters(availability) {
  const a = availability || {};
  const totals = a.totalAmounts || {};
  return Object.keys(totals)
    .sort()
    .map((token) => meter(token, (a.amounts || {})[token], totals[token], a.heldByBand || []));
}

export function attributeChips(attributes) {
  return el(
    "span",
    { class: "chips" },
    Object.entries(attributes || {})
      .sort()
      .map(([k, v]) => el("span", { class: "chip" }, `${k}=${v}`)),
  );
}

export function table(headers, rows, attrs = {}) {
  return el(
    "table",
    attrs,
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows),
  );
}

export function errorBox(err) {
  return el("div", { class: "error-box" }, `${err.code ? `${err.code}: ` : ""}${err.message}`);
}
