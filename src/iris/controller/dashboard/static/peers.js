// The Peers page: per peer whether it answers and when it last did, each of its backends with the
// attributes it advertises and its free/total capacity, and the federated jobs it runs for us; then
// the clusters that hand jobs to this one (inbound), with their last call here.

import { call, callAll } from "./api.js";
import { ago, attributeChips, availabilityMeters, el, jobLink, jobTasks, stateBadge, table } from "./ui.js";

export function peersPage(root) {
  const list = el("div", { id: "peers" });
  root.append(el("section", {}, el("h1", {}, "Peers"), list));

  async function refresh() {
    const { peers = [], inbound = [] } = await callAll("ListPeers", {}, "peers");
    const jobsByPeer = await Promise.all(peers.map((p) => call("ListJobs", { cluster: p.peerId, limit: 50 })));
    list.replaceChildren(
      ...peers.map((p, i) => {
        const jobs = jobsByPeer[i];
        return el(
          "article",
          { class: "card peer", dataset: { peer: p.peerId } },
          el("h2", {}, p.peerId, " ",
            el("span", { class: `reach ${p.reachable ? "ok" : "bad"}` }, p.reachable ? "reachable" : "unreachable")),
          el("p", { class: "muted" }, `${p.address} · last contact ${ago(p.lastContactMs)} · ${p.activeFederatedJobs || 0} active federated job(s)`),
          p.lastError ? el("p", { class: "error" }, `last error: ${p.lastError}`) : "",
          !(p.backends || []).length ? el("p", { class: "muted" }, "no backends known yet: the peer has not answered a heartbeat") : table(
            ["Backend", "Kind", "Advertised attributes", "Free / total"],
            (p.backends || []).map((b) => el("tr", { dataset: { backend: b.id } },
              el("td", {}, b.id), el("td", {}, b.kind), el("td", {}, attributeChips(b.attributes)),
              el("td", {}, b.availability ? availabilityMeters(b.availability) : el("span", { class: "muted" }, "no report: matched on shape")))),
            { class: "peer-backends" },
          ),
          el("h3", {}, `Federated jobs there (${jobs.total || 0})`),
          (jobs.jobs || []).length
            ? table(["Job", "User", "State", "Tasks"], jobs.jobs.map((j) => el("tr", { dataset: { job: j.jobId } },
              el("td", {}, jobLink(j.jobId)), el("td", {}, j.user), el("td", {}, stateBadge(j.state), j.stale ? " (stale)" : ""),
              el("td", {}, jobTasks(j)))), { class: "peer-jobs" })
            : el("p", { class: "muted" }, "none"),
        );
      }),
    );
    list.append(el("h2", {}, "Clusters that hand jobs to this one"));
    list.append(inbound.length
      ? table(["Cluster", "Trusted", "Last call", "Active federated jobs"], inbound.map((p) => el("tr", { dataset: { inbound: p.peerId } },
        el("td", {}, p.peerId),
        el("td", {}, p.trusted ? "yes (auth.federation_peers)" : "no longer: only its jobs remain"),
        el("td", {}, p.lastContactMs ? `${p.lastCall} ${ago(p.lastContactMs)}` : "none since this controller started"),
        el("td", {}, String(p.activeFederatedJobs || 0)))), { id: "inbound-peers" })
      : el("p", { class: "muted", id: "no-inbound" }, "No cluster hands jobs to this one."));
    if (!peers.length) list.prepend(el("p", { class: "muted", id: "no-peers" }, "This cluster hands jobs to no peer."));
  }
  return { refresh };
}
