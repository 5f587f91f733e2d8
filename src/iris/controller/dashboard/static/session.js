// Who the dashboard is talking as (from GetClusterInfo), and the confirmation every destructive
// action goes through.

export const session = { caller: "", role: "", cluster: "" };

// Whether the signed-in caller may stop a job of `owner`: its owner or an admin. The server decides;
// this only avoids offering what it would refuse.
export function mayStop(owner) {
  return session.role === "admin" || (session.role === "user" && !!owner && session.caller === owner);
}

// A yes/no question in a modal dialog; resolves to true when the person confirms.
export function confirmAction(title, text, action) {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = action;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}
