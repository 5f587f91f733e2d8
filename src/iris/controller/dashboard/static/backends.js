// The Backends page: per backend its attributes, a free/total meter per device variant with what
// each band holds, and its workers with what they have in use.

import { callAll } from "./api.js";
import { amount, attributeChips, availabilityMeters, bytes, el, meter, num, table } from "./ui.js";

export function backendsPage(root) {
  const list = el("div", { id: "backends" });
  root.append(el("section", {}, el("h1", {}, "Backends"), list));

  async function refresh() {
    const [{ backends = [], cluster = "" }, { workers = [] }] = await Promise.all([
      callAll("ListBackends", {}, "backends"),
      callAll("ListWorkers", {}, "workers"),
    ]);
    list.replaceChildren(
      ...backends.map((b) => {
        const mine = workers.filter((w) => w.backendId === b.id);
        const live = mine.filter((w) => w.alive);
        const dead = mine.filter((w) => !w.alive);
        const meters = availabilityMeters(b.availability);
        // CPU-only backends report no device amounts: show their cores as the meter instead. A dead
        // worker's cores are no capacity (nothing is placed there): they are named apart.
        if (!meters.length && live.length) {
          const total = live.reduce((s, w) => s + num(w.capacity?.cpu), 0);
          const used = live.reduce((s, w) => s + num(w.used?.cpu), 0);
          meters.push(meter("cpu", total - used, total));
        }
        if (dead.length) {
          const cores = dead.reduce((s, w) => s + num(w.capacity?.cpu), 0);
          meters.push(el("p", { class: "muted dead-workers" },
            `${dead.length} dead worker${dead.length === 1 ? "" : "s"} (cpu ${amount(cores)}) not counted`));
        }
        return el(
          "article",
          { class: "card backend", dataset: { backend: b.id } },
          el("h2", {}, b.id, el("span", { class: "muted" }, ` ${b.kind} · ${b.workers || 0} worker(s) · ${cluster}`)),
          attributeChips(b.attributes),
          el("div", { class: "meters" }, meters.length ? meters : el("p", { class: "muted" }, "reports no availability")),
          table(
            ["Worker", "Alive", "CPU used / total", "Memory used / total", "Devices used / total", "Running tasks"],
            mine.map((w) => el("tr", { dataset: { worker: w.workerId } },
              el("td", {}, w.workerId),
              el("td", {}, w.alive ? "yes" : el("span", { class: "error" }, "no")),
              el("td", {}, `${amount(w.used?.cpu)} / ${amount(w.capacity?.cpu)}`),
              el("td", {}, `${bytes(w.used?.memoryBytes)} / ${bytes(w.capacity?.memoryBytes)}`),
              el("td", {}, w.capacity?.device?.kind && w.capacity.device.kind !== "cpu"
                ? `${num(w.used?.device?.count)} / ${num(w.capacity.device.count)} ${w.capacity.device.variant || w.capacity.device.kind}` : ""),
              el("td", {}, String(w.runningTasks || 0)))),
            { class: "workers" },
          ),
        );
      }),
    );
    if (!backends.length) list.append(el("p", { class: "muted" }, "This cluster has no backends."));
  }
  return { refresh };
}
