// The Job page: what the job is and where it runs (its federation handle when a peer runs it), its
// tasks and attempts, why it waits (explain), its parent and children, a stop button for those who
// may stop it, and a log view that follows the job while it runs.

import { ApiError, call } from "./api.js";
import { confirmAction, mayStop, session } from "./session.js";
import { TERMINAL, ago, amount, bytes, clock, el, errorBox, jobLink, jobTasks, num, span, stateBadge, table } from "./ui.js";

const LOG_POLL_MS = 1000;
const MAX_LOG_LINES = 20000; // kept in the page; older lines are dropped from the view

export function jobPage(root, route) {
  const jobId = route.jobId;
  const title = el("h1", {}, jobId);
  const stopBox = el("div", { class: "actions", id: "job-actions" });
  const summary = el("div", { id: "job-summary" });
  const handle = el("section", { id: "job-handle", hidden: true });
  const explain = el("section", { id: "job-explain", hidden: true });
  const family = el("section", { id: "job-family" });
  const tasks = el("section", { id: "job-tasks" });
  const logs = logView(jobId);
  root.append(el("section", {}, el("div", { class: "title-row" }, title, stopBox), summary), handle, explain, family, tasks, logs.node);

  let job = null;
  let stopOffered = null;
  let kinds = null; // backend id -> kind (local, workers, slurm), for what names an attempt's process

  function renderStop() {
    const allowed = mayStop(job.owner) && !TERMINAL.has(job.state);
    const key = `${allowed}:${TERMINAL.has(job.state)}`;
    if (stopOffered === key || stopOffered === "done") return; // keep the outcome of a stop in view
    stopOffered = key;
    if (TERMINAL.has(job.state)) {
      stopBox.replaceChildren();
    } else if (allowed) {
      stopBox.replaceChildren(el("button", { type: "button", class: "danger", id: "stop-job", onclick: stop }, "Stop job"));
    } else {
      stopBox.replaceChildren(el("span", { class: "muted", id: "stop-not-offered" },
        `read-only for ${session.caller || "you"} (${session.role || "not signed in"}): only ${job.owner || "its owner"} or an admin may stop this job`));
    }
  }

  async function stop() {
    const ok = await confirmAction(`Stop ${jobId}?`,
      "Its running tasks are killed and its child jobs are stopped with it. This cannot be undone.", "Stop job");
    if (!ok) return;
    try {
      const resp = await call("TerminateJob", { jobId, reason: `stopped from the dashboard by ${session.caller}` });
      stopBox.replaceChildren(el("span", { class: "ok", id: "stop-result" },
        `Stopped ${(resp.terminated || []).length} job(s); now ${resp.state}`));
    } catch (err) {
      stopBox.replaceChildren(el("span", { class: "error", id: "stop-result" }, `Not stopped: ${err.message}`));
    }
    stopOffered = "done";
    await refresh();
  }

  function renderSummary() {
    const r = job.resources || {};
    const dev = r.device || {};
    const device = dev.kind && dev.kind !== "cpu" ? `${dev.kind} ${dev.variant || "any"}×${dev.count || 1}` : "";
    const rows = [
      ["State", stateBadge(job.state), job.error ? el("span", { class: "error" }, ` ${job.error}`) : ""],
      ["Pending reason", job.pendingReason],
      ["User / owner", `${job.user} / ${job.owner}`],
      ["Cluster", job.cluster || "(choosing a peer)"],
      ["Band", job.priority],
      ["Tasks", `${job.replicas || 1} replica(s): `, jobTasks(job)],
      ["Resources", [`cpu ${amount(r.cpu)}`, `memory ${bytes(r.memoryBytes)}`, num(r.diskBytes) ? `disk ${bytes(r.diskBytes)}` : "", device]
        .filter(Boolean).join(", ")],
      ["Time limit", num(job.timeoutS) ? span(job.timeoutS) : "none"],
      ["Command", el("code", {}, shellWords(job.command || []))],
      ["Constraints", (job.constraints || []).map((c) => `${c.key} ${c.op} ${(c.values || []).join(",")}`).join("; ")],
      ["Submitted", clock(job.submittedMs)],
      ["Started", clock(job.startedMs)],
      ["Finished", clock(job.finishedMs)],
      ["Exit code", job.hasExitCode ? String(job.exitCode || 0) : ""],
    ].filter(([, ...v]) => v.some((x) => x));
    summary.replaceChildren(el("dl", { class: "facts" }, rows.map(([k, ...v]) => [el("dt", {}, k), el("dd", {}, ...v)])));
  }

  function renderHandle() {
    if (!job.handoffState) return;
    handle.hidden = false;
    handle.replaceChildren(
      el("h2", {}, "Federation handle"),
      el("dl", { class: "facts" },
        el("dt", {}, "Peer"), el("dd", { id: "handle-peer" }, job.peerId || "(not chosen yet)"),
        el("dt", {}, "Handoff state"), el("dd", { id: "handle-state" }, job.handoffState),
        el("dt", {}, "Owner"), el("dd", { id: "handle-owner" }, job.owner),
        el("dt", {}, "Last sync"), el("dd", { id: "handle-sync" }, ago(job.lastSyncMs)),
        el("dt", {}, "Stale"), el("dd", { id: "handle-stale" }, job.stale ? "yes: the peer has not answered lately; showing its last known state" : "no"),
      ),
    );
  }

  async function renderExplain(taskList) {
    // A pending job, or a running one some of whose replicas wait: the controller says why.
    const waiting = job.state === "RUNNING" && taskList.some((t) => t.state === "PENDING");
    if (job.state !== "PENDING" && !waiting) {
      explain.hidden = true;
      return;
    }
    const ex = await call("ExplainJob", { jobId });
    explain.hidden = false;
    explain.replaceChildren(
      el("h2", {}, waiting ? "Why some of its tasks wait" : "Why it waits"),
      el("p", { id: "explain-summary" }, ex.summary || ""),
      (ex.groups || []).length
        ? table(["Backend", "Workers", "Group", "Verdict", "Reasons"], ex.groups.map((g) => el("tr", {},
          el("td", {}, g.backendId), el("td", {}, String(g.workers || 0)), el("td", {}, g.group),
          el("td", {}, g.verdict), el("td", {}, (g.reasons || []).join("; ")))))
        : "",
      (ex.lines || []).length && !(ex.groups || []).length ? el("pre", { class: "explain-lines" }, ex.lines.join("\n")) : "",
    );
  }

  async function renderFamily() {
    const parts = [];
    if (job.parentJobId) parts.push(el("p", { id: "job-parent" }, "Parent: ", jobLink(job.parentJobId)));
    const kids = await call("ListJobs", { parentJobId: jobId, limit: 200 });
    if ((kids.jobs || []).length) {
      parts.push(el("h2", {}, `Children (${kids.total})`),
        table(["Job", "State", "Cluster", "Tasks"], kids.jobs.map((k) => el("tr", {},
          el("td", {}, jobLink(k.jobId)), el("td", {}, stateBadge(k.state)), el("td", {}, k.cluster),
          el("td", { class: "counts" }, jobTasks(k)))), { id: "job-children" }));
    }
    family.replaceChildren(...parts);
  }

  // What runs an attempt where its backend keeps it: a Slurm job, or a process on a host.
  function process(a) {
    if (!a.pid) return "";
    return (kinds || {})[a.backendId] === "slurm" ? `Slurm job ${a.pid}` : `pid ${a.pid}`;
  }

  function renderTasks(taskList, total) {
    const rows = [];
    for (const t of taskList) {
      rows.push(el("tr", { class: "task", dataset: { task: t.index || 0 } },
        el("td", {}, `${t.index || 0}`), el("td", {}, stateBadge(t.state)), el("td", {}, (t.attempt || 0) >= 0 ? String(t.attempt || 0) : ""),
        el("td", {}, t.backendId), el("td", {}, t.cluster && t.cluster !== session.cluster ? `peer ${t.cluster}` : t.workerId),
        el("td", {}, ""), el("td", {}, t.hasExitCode ? String(t.exitCode || 0) : ""), el("td", {}, clock(t.startedMs)),
        el("td", {}, clock(t.finishedMs)), el("td", { class: "error" }, t.error)));
      for (const a of t.attempts || []) {
        rows.push(el("tr", { class: "attempt", dataset: { attempt: a.attemptId || "" } },
          el("td", {}, `  ${t.index || 0}:${a.attempt || 0}`), el("td", {}, stateBadge(a.state)), el("td", {}, ""),
          el("td", {}, a.backendId), el("td", {}, a.workerId), el("td", { class: "process" }, process(a)),
          el("td", {}, a.hasExitCode ? String(a.exitCode || 0) : ""),
          el("td", {}, clock(a.startedMs)), el("td", {}, clock(a.finishedMs)), el("td", { class: "error" }, a.error)));
      }
    }
    // The answer holds the first page of tasks (each with its latest attempts); say when there are more.
    const more = total > taskList.length ? el("p", { class: "muted", id: "tasks-more" }, `showing the first ${taskList.length} of ${total} tasks`) : "";
    tasks.replaceChildren(el("h2", {}, "Tasks and attempts"),
      table(["Task", "State", "Attempt", "Backend", "Worker or peer", "Process", "Exit", "Started", "Finished", "Error"], rows, { id: "tasks-table" }), more);
  }

  async function refresh() {
    let resp;
    try {
      resp = await call("GetJobStatus", { jobId, includeTasks: true, includeAttempts: true });
    } catch (err) {
      if (err instanceof ApiError && err.code === "not_found") {
        summary.replaceChildren(errorBox(err));
        return;
      }
      throw err;
    }
    job = resp.job;
    if (kinds === null) {
      try {
        const { backends = [] } = await call("ListBackends", {});
        kinds = Object.fromEntries(backends.map((b) => [b.id, b.kind]));
      } catch {
        kinds = {}; // a caller that may not list backends still sees pids
      }
    }
    renderSummary();
    renderStop();
    renderHandle();
    renderTasks(resp.tasks || [], resp.totalTasks || 0);
    await Promise.all([renderExplain(resp.tasks || []), renderFamily()]);
    logs.start();
  }

  return { refresh, stop: () => logs.stop() };
}

// A command as one would type it in a shell: words with spaces or quotes are single-quoted.
function shellWords(words) {
  return words.map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replaceAll("'", "'\\''")}'`)).join(" ");
}

// The log view: FetchLogs from the last line seen, every second while the job runs, appended to
// the page. It follows the end while the reader is at the end; a search box filters the lines.
function logView(jobId) {
  const box = el("pre", { class: "logs", id: "log-lines", tabindex: 0 });
  const search = el("input", { type: "search", id: "log-search", placeholder: "search the log", size: 30 });
  const matches = el("span", { class: "muted", id: "log-matches" });
  const status = el("span", { class: "muted", id: "log-status" });
  const end = el("button", { type: "button", id: "log-end" }, "Jump to end ↓");
  const node = el("section", { id: "job-logs" }, el("h2", {}, "Logs"),
    el("div", { class: "log-tools" }, search, matches, end, status), box);
  let seq = 0;
  let timer = null;
  let busy = false;
  let finished = false;
  let follow = true;

  function atEnd() {
    return box.scrollHeight - box.scrollTop - box.clientHeight < 24;
  }
  box.addEventListener("scroll", () => {
    follow = atEnd();
  });
  end.addEventListener("click", () => {
    follow = true;
    box.scrollTop = box.scrollHeight;
  });

  function applySearch() {
    const q = search.value.toLowerCase();
    let n = 0;
    for (const line of box.children) {
      const hit = !q || line.textContent.toLowerCase().includes(q);
      line.hidden = !hit;
      line.classList.toggle("hit", !!q && hit);
      if (q && hit) n += 1;
    }
    matches.textContent = q ? `${n} matching line(s)` : "";
  }
  search.addEventListener("input", applySearch);

  async function poll() {
    if (busy || (document.hidden && seq > 0)) return;
    busy = true;
    try {
      const resp = await call("FetchLogs", { jobId, taskIndex: -1, afterSeq: String(seq), limit: 2000 });
      const q = search.value.toLowerCase();
      for (const line of resp.lines || []) {
        const prefix = `[${line.taskIndex || 0}:${line.attempt || 0}] `;
        const row = el("div", { class: `line ${line.stream || "stdout"}` }, el("span", { class: "lp" }, prefix), line.text);
        if (q) {
          const hit = row.textContent.toLowerCase().includes(q);
          row.hidden = !hit;
          row.classList.toggle("hit", hit);
        }
        box.append(row);
      }
      while (box.children.length > MAX_LOG_LINES) box.firstChild.remove();
      seq = Number(resp.nextSeq || seq);
      if ((resp.lines || []).length && q) applySearch();
      if (follow) box.scrollTop = box.scrollHeight;
      finished = !!resp.jobFinished && !(resp.lines || []).length;
      if (finished && !box.children.length) {
        box.append(el("div", { class: "line muted", id: "no-output" }, "no output: the job printed nothing"));
      }
      status.textContent = finished ? `${resp.jobState}: all output shown` : "following";
      if (finished) stop();
    } catch (err) {
      status.textContent = `logs unavailable: ${err.message}`;
    } finally {
      busy = false;
    }
  }

  function start() {
    if (timer || finished) return;
    poll();
    timer = setInterval(poll, LOG_POLL_MS);
  }
  function stop() {
    clearInterval(timer);
    timer = null;
  }
  return { node, start, stop };
}
