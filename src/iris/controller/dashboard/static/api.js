// The one way the dashboard reaches the controller: the Connect JSON endpoints the CLI and SDK use,
// with the session's token (sessionStorage: one browser tab's session, never the address bar).

const TOKEN_KEY = "iris.token";

export function sessionToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setSessionToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// Calls ControllerService/<method> with a JSON body; resolves to the JSON answer or throws ApiError.
export async function call(method, body = {}, token = sessionToken()) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  let resp;
  try {
    resp = await fetch(`/iris.v1.ControllerService/${method}`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError("unavailable", `the controller did not answer (${err.message})`);
  }
  const text = await resp.text();
  let data = {};
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = { message: text };
  }
  if (!resp.ok) throw new ApiError(data.code || `http_${resp.status}`, data.message || resp.statusText);
  return data;
}

// Every item of a paged list (ListWorkers, ListPeers, …): calls `method` again with each answer's
// nextPageToken until the last page, and resolves to the first answer with `field` holding them all.
export async function callAll(method, body, field) {
  const first = await call(method, body);
  const items = [...(first[field] || [])];
  let token = first.nextPageToken || "";
  while (token) {
    const page = await call(method, { ...body, pageToken: token });
    const more = page[field] || [];
    items.push(...more);
    token = more.length ? page.nextPageToken || "" : "";
  }
  return { ...first, [field]: items, nextPageToken: "" };
}
