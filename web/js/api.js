// The API client: tokens in sessionStorage (never in URLs), one refresh on a 401, errors as APIError with the
// server's message. Everything else in the app talks to the server through `api` and `fetchBlob`.

export const FOLDER = "application/vnd.nimbus.folder";

export const session = {
  get tokens() { try { return JSON.parse(sessionStorage.getItem("nimbus.tokens")); } catch { return null; } },
  set tokens(value) { value ? sessionStorage.setItem("nimbus.tokens", JSON.stringify(value)) : sessionStorage.removeItem("nimbus.tokens"); },
  get username() { return sessionStorage.getItem("nimbus.username") || ""; },
  set username(value) { sessionStorage.setItem("nimbus.username", value); },
};

export class APIError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `The server answered ${status}.`);
    this.status = status;
    this.code = body && body.error && body.error.code;
    this.body = body;
  }
}

/** Called when the session cannot be refreshed (set by main.js: back to the sign-in page). */
export const hooks = { sessionEnded: () => {} };

let refreshing = null;
async function refreshTokens() {
  const tokens = session.tokens;
  if (!tokens) throw new APIError(401, null);
  if (!refreshing) {
    refreshing = fetch("/v1/auth/refresh", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ refreshToken: tokens.refreshToken }),
    }).then(async (response) => {
      if (!response.ok) throw new APIError(response.status, await response.json().catch(() => null));
      session.tokens = await response.json();
    }).finally(() => { refreshing = null; });
  }
  return refreshing;
}

/** Calls the API; refreshes the access token once on 401; throws APIError with the server's message. */
export async function api(method, path, { json, body, headers = {}, raw = false, signal } = {}, retried = false) {
  const tokens = session.tokens;
  const init = { method, headers: { ...headers }, signal };
  if (tokens) init.headers.Authorization = `Bearer ${tokens.accessToken}`;
  if (json !== undefined) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(json); }
  else if (body !== undefined) init.body = body;
  const response = await fetch(path, init);
  if (response.status === 401 && tokens && !retried) {
    try { await refreshTokens(); } catch { hooks.sessionEnded("Your session ended; sign in again."); throw new APIError(401, null); }
    return api(method, path, { json, body, headers, raw, signal }, true);
  }
  if (raw) return response;
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok && response.status !== 308) throw new APIError(response.status, data);
  return data;
}

/** Fetches bytes with the Authorization header (no token in URLs) as a Blob of `type` (default: as served). */
export async function fetchBlob(path, { signal, type } = {}) {
  const response = await api("GET", path, { raw: true, signal });
  if (!response.ok) throw new APIError(response.status, await response.json().catch(() => null));
  const blob = await response.blob();
  return type ? new Blob([blob], { type }) : blob;
}

/** Saves a blob under `name` (the browser's download). */
export function saveBlob(blob, name) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

/** Downloads a path's bytes and saves them under `name`. */
export async function download(path, name) { saveBlob(await fetchBlob(path), name); }

/** Every page of a listing path (`…?…`), `limit` items a page; `onPage(files, pagination)` as each arrives. */
export async function allPages(path, onPage, { limit = 1000, signal, isCurrent = () => true } = {}) {
  let page = 1;
  for (;;) {
    const joiner = path.includes("?") ? "&" : "?";
    const list = await api("GET", `${path}${joiner}page=${page}&limit=${limit}`, { signal });
    if (!isCurrent()) return;
    onPage(list.files, list.pagination);
    if (!list.pagination.nextPage) return;
    page = list.pagination.nextPage;
  }
}
