// The dashboard's shell: who is signed in, which page the address names, and the live refresh.
//
// The address holds the page and its filters (#/jobs?state=PENDING), so a reload or a shared link
// shows the same view; it never holds the token. Each page builds its skeleton once and then only
// refreshes its data every few seconds, so typed filters, open dialogs and the scroll position stay.
// A sign-in refreshes the page shown in place, as the new caller (pages read the session on every
// refresh): built anew, its rows would be drawn twice, the second time a moment later.

import { ApiError, call, sessionToken, setSessionToken } from "./api.js";
import { backendsPage } from "./backends.js";
import { jobPage } from "./job.js";
import { jobsPage } from "./jobs.js";
import { peersPage } from "./peers.js";
import { session } from "./session.js";

const REFRESH_MS = 2000;

let current = null; // { page, timer }

function parseRoute() {
  const hash = location.hash.replace(/^#/, "") || "/jobs";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  if (parts[0] === "job" && parts.length > 1) return { name: "job", jobId: decodeURIComponent(parts.slice(1).join("/")), params };
  if (["jobs", "backends", "peers"].includes(parts[0])) return { name: parts[0], params };
  return { name: "jobs", params };
}

const PAGES = { jobs: jobsPage, job: jobPage, backends: backendsPage, peers: peersPage };

async function show() {
  if (current) current.page.stop?.();
  clearInterval(current?.timer);
  const route = parseRoute();
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.page === route.name || (route.name === "job" && a.dataset.page === "jobs"));
  }
  const root = document.getElementById("page");
  root.replaceChildren();
  const page = PAGES[route.name](root, route);
  current = { page, timer: null };
  await refresh(page);
  if (current.page === page && !page.waiting) current.timer = setInterval(() => refresh(page), REFRESH_MS);
}

// One refresh at a time per page, and none while the tab is hidden: a slow controller or a
// forgotten tab never piles requests onto the cluster. None either while the cluster waits for a
// sign-in: the sign-in resumes them.
function refresh(page) {
  if (page.busy) return page.busy;
  if (document.hidden && page.refreshed) return Promise.resolve();
  page.busy = load(page).finally(() => {
    page.busy = null;
  });
  return page.busy;
}

async function load(page) {
  try {
    await page.refresh();
    page.refreshed = true;
    banner("");
  } catch (err) {
    if (err instanceof ApiError && err.code === "unauthenticated") {
      pause(page);
      openSignIn(err.message);
    } else {
      banner(err.message || String(err));
    }
  }
}

function pause(page) {
  page.waiting = true;
  if (current?.page !== page) return;
  clearInterval(current.timer);
  current.timer = null;
}

// Refreshes the page shown now in place (after a sign-in), then keeps refreshing it.
async function resume() {
  if (!current) return show();
  const page = current.page;
  pause(page);
  await page.busy; // a refresh begun as the previous caller lands first, then this one replaces it
  page.waiting = false;
  await refresh(page);
  if (current.page === page && !current.timer && !page.waiting) current.timer = setInterval(() => refresh(page), REFRESH_MS);
}

function banner(text) {
  const node = document.getElementById("banner");
  node.hidden = !text;
  node.textContent = text;
}

async function loadSession() {
  try {
    const info = await call("GetClusterInfo");
    Object.assign(session, { caller: info.caller || "", role: info.callerRole || "", cluster: info.name || "" });
    document.getElementById("cluster-name").textContent = info.name || "";
    document.title = `Iris · ${info.name}`;
    document.getElementById("who").textContent = `${session.caller} (${session.role})`;
  } catch (err) {
    Object.assign(session, { caller: "", role: "" });
    document.getElementById("who").textContent = "not signed in";
    if (err instanceof ApiError && err.code === "unauthenticated") openSignIn(err.message);
    else banner(err.message);
  }
  const signedIn = !!sessionToken();
  document.getElementById("sign-in").hidden = signedIn;
  document.getElementById("sign-out").hidden = !signedIn;
}

function openSignIn(why) {
  const dialog = document.getElementById("sign-in-dialog");
  const whyNode = document.getElementById("sign-in-why");
  whyNode.hidden = !why;
  whyNode.textContent = why ? `This cluster asks who you are: ${why}` : "";
  document.getElementById("sign-in-error").hidden = true;
  if (!dialog.open) dialog.showModal();
}

async function submitSignIn(event) {
  event.preventDefault();
  const token = document.getElementById("token-input").value.trim();
  const error = document.getElementById("sign-in-error");
  try {
    await call("GetClusterInfo", {}, token);
  } catch (err) {
    error.hidden = false;
    error.textContent = `That token was refused: ${err.message}`;
    return;
  }
  setSessionToken(token);
  document.getElementById("token-input").value = "";
  document.getElementById("sign-in-dialog").close();
  await loadSession();
  await resume();
}

function start() {
  document.getElementById("sign-in").addEventListener("click", () => openSignIn(""));
  document.getElementById("sign-out").addEventListener("click", async () => {
    setSessionToken("");
    await loadSession();
    await show();
  });
  document.getElementById("sign-in-form").addEventListener("submit", submitSignIn);
  document.getElementById("sign-in-cancel").addEventListener("click", () => document.getElementById("sign-in-dialog").close());
  window.addEventListener("hashchange", show);
  loadSession().then(show);
}

start();
