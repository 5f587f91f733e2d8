// The Jobs page: filters (state, user, cluster, name prefix) kept in the address, one server-side
// page of ListJobs at a time (keyed by the server's page token), refreshed in place.

import { call, callAll } from "./api.js";
import { session } from "./session.js";
import { STATES, age, el, jobLink, jobTasks, stateBadge, table } from "./ui.js";

const PAGE_SIZE = 50;
const FILTERS = ["state", "user", "cluster", "prefix"];

export function jobsPage(root, route) {
  const params = route.params;
  const pageToken = params.get("page") || "";
  const earlier = (params.get("back") || "").split(",").filter(Boolean); // tokens of the pages before

  const form = el("form", { class: "filters", id: "job-filters" });
  const state = el("select", { name: "state", id: "filter-state" }, el("option", { value: "" }, "any state"),
    STATES.map((s) => el("option", { value: s }, s)));
  const user = el("input", { name: "user", id: "filter-user", placeholder: "user", size: 12 });
  const cluster = el("select", { name: "cluster", id: "filter-cluster" }, el("option", { value: "" }, "any cluster"));
  const prefix = el("input", { name: "prefix", id: "filter-prefix", placeholder: "/user/name prefix", size: 24 });
  const inputs = { state, user, cluster, prefix };
  for (const key of FILTERS) inputs[key].value = params.get(key) || "";
  form.append(state, user, cluster, prefix, el("button", { type: "submit" }, "Filter"),
    el("button", { type: "button", onclick: () => go({}) }, "Clear"));

  function go(filters, page = "", back = []) {
    const q = new URLSearchParams();
    for (const key of FILTERS) if (filters[key]) q.set(key, filters[key]);
    if (page) q.set("page", page);
    if (back.length) q.set("back", back.join(","));
    location.hash = `#/jobs${q.toString() ? `?${q}` : ""}`;
  }
  const current = () => Object.fromEntries(FILTERS.map((k) => [k, inputs[k].value.trim()]));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    go(current());
  });
  state.addEventListener("change", () => go(current()));
  cluster.addEventListener("change", () => go(current()));

  const summary = el("span", { id: "jobs-summary", class: "muted" });
  const counts = el("div", { class: "state-counts", id: "state-counts" });
  const prev = el("button", { type: "button", id: "page-prev", disabled: !pageToken }, "‹ Newer");
  const next = el("button", { type: "button", id: "page-next", disabled: true }, "Older ›");
  let nextToken = "";
  prev.addEventListener("click", () => {
    const back = [...earlier];
    const token = back.pop() || "";
    go(current(), token === "first" ? "" : token, back);
  });
  next.addEventListener("click", () => go(current(), nextToken, [...earlier, pageToken || "first"]));

  const tbody = el("tbody", { id: "jobs-rows" });
  const grid = el(
    "table",
    { class: "jobs", id: "jobs-table" },
    el("thead", {}, el("tr", {}, ["Job", "User", "State", "Cluster", "Tasks", "Age", "Pending reason or error"].map((h) => el("th", {}, h)))),
    tbody,
  );
  root.append(
    el("section", {}, el("div", { class: "title-row" }, el("h1", {}, "Jobs"), counts), form, el("div", { class: "pager" }, summary, prev, next), grid),
  );

  let peersLoaded = false;
  let refreshes = 0; // exposed as data-refreshes so a reader (or a test) can tell a refresh landed
  async function loadClusters() {
    const { peers = [] } = await callAll("ListPeers", {}, "peers");
    const names = [session.cluster, ...peers.map((p) => p.peerId)].filter(Boolean);
    const chosen = params.get("cluster") || "";
    if (chosen && !names.includes(chosen)) names.push(chosen);
    cluster.append(...names.map((n) => el("option", { value: n }, n === session.cluster ? `${n} (here)` : n)));
    cluster.value = chosen;
    peersLoaded = true;
  }

  async function refresh() {
    const clusters = peersLoaded ? null : loadClusters();
    const request = { limit: PAGE_SIZE, pageToken };
    for (const key of FILTERS) {
      const value = params.get(key);
      if (value) request[key] = value;
    }
    const [resp, info] = await Promise.all([call("ListJobs", request), call("GetClusterInfo"), clusters]);
    // The whole cluster at a glance: jobs per state, each a link to that filter.
    const byState = info.jobCounts || {};
    counts.replaceChildren(
      ...STATES.filter((s) => byState[s]).map((s) =>
        el("a", { href: `#/jobs?state=${s}`, class: `state state-${s.toLowerCase()}`, dataset: { state: s } }, `${byState[s]} ${s}`),
      ),
    );
    const jobs = resp.jobs || [];
    tbody.replaceChildren(
      ...jobs.map((j) =>
        el(
          "tr",
          { dataset: { job: j.jobId } },
          el("td", {}, jobLink(j.jobId)),
          el("td", {}, j.user),
          el("td", {}, stateBadge(j.state)),
          el("td", {}, j.cluster || "(choosing a peer)", j.stale ? el("span", { class: "stale", title: "the peer has not synced lately" }, " stale") : ""),
          el("td", { class: "counts" }, jobTasks(j)),
          el("td", { title: new Date(Number(j.submittedMs)).toLocaleString() }, age(j.submittedMs)),
          el("td", { class: "reason" }, j.pendingReason || (j.state === "FAILED" || j.state === "UNSCHEDULABLE" ? j.error : "")),
        ),
      ),
    );
    if (!jobs.length) tbody.append(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No jobs match these filters.")));
    const first = earlier.length * PAGE_SIZE;
    const total = resp.total || 0;
    summary.textContent = jobs.length ? `${first + 1}–${first + jobs.length} of ${total} jobs` : `0 of ${total} jobs`;
    nextToken = resp.nextPageToken || "";
    next.disabled = !nextToken;
    refreshes += 1;
    grid.dataset.refreshes = String(refreshes);
    if (refreshes === 1) performance.mark("iris:jobs-rendered"); // time to first rows, for bench/dashboard.py
  }

  return { refresh };
}
