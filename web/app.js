// Nimbus web app: plain JavaScript, no build step, no external assets.
// Tokens live in sessionStorage (never in URLs); every API call sends them in the Authorization header.
"use strict";

const FOLDER = "application/vnd.nimbus.folder";
const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- session and API

const session = {
  get tokens() { try { return JSON.parse(sessionStorage.getItem("nimbus.tokens")); } catch { return null; } },
  set tokens(value) { value ? sessionStorage.setItem("nimbus.tokens", JSON.stringify(value)) : sessionStorage.removeItem("nimbus.tokens"); },
  username: () => sessionStorage.getItem("nimbus.username") || "",
};

class APIError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `The server answered ${status}.`);
    this.status = status;
    this.code = body && body.error && body.error.code;
    this.body = body;
  }
}

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
async function api(method, path, { json, body, headers = {}, raw = false, signal } = {}, retried = false) {
  const tokens = session.tokens;
  const init = { method, headers: { ...headers }, signal };
  if (tokens) init.headers.Authorization = `Bearer ${tokens.accessToken}`;
  if (json !== undefined) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(json); }
  else if (body !== undefined) init.body = body;
  const response = await fetch(path, init);
  if (response.status === 401 && tokens && !retried) {
    try { await refreshTokens(); } catch { signOut("Your session ended; sign in again."); throw new APIError(401, null); }
    return api(method, path, { json, body, headers, raw, signal }, true);
  }
  if (raw) return response;
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok && response.status !== 308) throw new APIError(response.status, data);
  return data;
}

// ---------------------------------------------------------------- small helpers

function showAlert(message, kind = "error") {
  const alert = $("alert");
  alert.textContent = message;
  alert.className = kind === "info" ? "alert info" : "alert";
  alert.hidden = false;
  clearTimeout(showAlert.timer);
  showAlert.timer = setTimeout(() => { alert.hidden = true; }, 8000);
}

function reportError(error) {
  if (error && error.name === "AbortError") return;
  showAlert(error instanceof APIError ? error.message : `Something went wrong: ${error && error.message || error}`);
}

function formatSize(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

function formatDate(text) {
  const date = new Date(text);
  return isNaN(date) ? "" : date.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

/** A small SVG icon by type (no emoji: fonts differ; no image files: nothing to fetch). */
function iconFor(file) {
  const type = file.mimeType || "";
  const kinds = [
    [type === FOLDER, "folder", "#54aeff"], [type.startsWith("image/"), "image", "#8250df"], [type.startsWith("video/"), "video", "#cf222e"],
    [type.startsWith("audio/"), "audio", "#bf3989"], [type === "application/pdf", "pdf", "#cf222e"],
    [/zip|tar|gzip|7z/.test(type), "archive", "#9a6700"], [/sheet|excel|csv/.test(type), "sheet", "#1a7f37"],
    [/presentation|powerpoint/.test(type), "slides", "#bc4c00"], [type.startsWith("text/") || /json|xml|yaml/.test(type), "text", "#57606a"],
  ];
  const [, kind, color] = kinds.find(([match]) => match) || [true, "file", "#6e7781"];
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", "22");
  svg.setAttribute("height", "22");
  svg.setAttribute("class", `ico ico-${kind}`);
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("fill", color);
  path.setAttribute("d", kind === "folder"
    ? "M2 5.5A1.5 1.5 0 0 1 3.5 4h5l2 2h10A1.5 1.5 0 0 1 22 7.5v11a1.5 1.5 0 0 1-1.5 1.5h-17A1.5 1.5 0 0 1 2 18.5z"
    : "M6 2h8l5 5v13.5A1.5 1.5 0 0 1 17.5 22h-11A1.5 1.5 0 0 1 5 20.5v-17A1.5 1.5 0 0 1 6.5 2zM13.5 3v4.5H18");
  svg.append(path);
  if (kind !== "folder") {
    const label = document.createElementNS("http://www.w3.org/2000/svg", "text");
    label.setAttribute("x", "12");
    label.setAttribute("y", "18");
    label.setAttribute("text-anchor", "middle");
    label.setAttribute("font-size", "6");
    label.setAttribute("font-family", "sans-serif");
    label.setAttribute("fill", "#fff");
    label.textContent = { image: "IMG", video: "VID", audio: "AUD", pdf: "PDF", archive: "ZIP", sheet: "XLS", slides: "PPT", text: "TXT", file: "" }[kind];
    svg.append(label);
  }
  return svg;
}

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

/** Asks for a line of text in a dialog; resolves to the text, or null when cancelled. */
function ask(title, label, value = "") {
  return new Promise((resolve) => {
    const dialog = $("prompt-dialog");
    $("prompt-title").textContent = title;
    $("prompt-label").textContent = label;
    const input = $("prompt-input");
    input.value = value;
    dialog.onclose = () => resolve(dialog.returnValue === "ok" && input.value.trim() ? input.value.trim() : null);
    dialog.showModal();
    input.focus();
    input.select();
  });
}

/** Downloads bytes with the Authorization header (no token in URLs) and saves them under `name`. */
async function download(url, name) {
  const response = await api("GET", url, { raw: true });
  if (!response.ok) throw new APIError(response.status, await response.json().catch(() => null));
  const blob = await response.blob();
  const link = element("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

// ---------------------------------------------------------------- views

const state = { folderId: "root", path: [], page: 0, nextPage: 1, loading: false, view: "files", revisionsOf: null };

function show(view) {
  state.view = view;
  for (const id of ["login-view", "files-view", "trash-view", "revisions-view", "settings-view", "shared-with-me-view", "shared-by-me-view"]) {
    $(id).hidden = id !== `${view}-view`;
  }
  const signedIn = Boolean(session.tokens);
  $("sign-out").hidden = !signedIn;
  $("settings-button").hidden = !signedIn;
  $("whoami").textContent = signedIn ? session.username() : "";
}

function signOut(message) {
  const tokens = session.tokens;
  if (tokens) fetch("/v1/auth/logout", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ refreshToken: tokens.refreshToken }) }).catch(() => {});
  session.tokens = null;
  events.stop();
  show("login");
  if (message) showAlert(message, "info");
  $("login-username").focus();
}

async function openFolder(folderId, path) {
  state.folderId = folderId;
  state.path = path;
  state.page = 0;
  renderBreadcrumbs();
  show("files");
  $("file-rows").replaceChildren();
  await reloadFolder();
}

function renderBreadcrumbs() {
  const nav = $("breadcrumbs");
  nav.replaceChildren();
  const crumbs = [{ id: "root", name: "My Drive" }, ...state.path];
  crumbs.forEach((crumb, index) => {
    if (index > 0) nav.append(element("span", { class: "sep", "aria-hidden": "true" }, "›"));
    if (index === crumbs.length - 1) nav.append(element("span", { "aria-current": "page" }, crumb.name));
    else nav.append(element("a", { href: "#", onclick: (event) => { event.preventDefault(); openFolder(crumb.id, state.path.slice(0, index)); } }, crumb.name));
  });
}

/** Bumped by every reload: a page that arrives for an older generation is dropped, never appended twice. */
let listingGeneration = 0;

/**
 * Reloads the pages already shown (after a change here or elsewhere). The new rows replace the old ones in one
 * step once every page has arrived, so the list is never seen empty halfway through (the upload dialog reads it
 * to spot name clashes).
 */
async function reloadFolder() {
  const generation = ++listingGeneration;
  const folderId = state.folderId;
  const pages = Math.max(state.page, 1);
  const rows = [];
  let page = 0;
  let nextPage = 1;
  try {
    while (page < pages && nextPage) {
      const list = await api("GET", `/v1/files?parentId=${encodeURIComponent(folderId)}&page=${nextPage}&limit=200`);
      if (generation !== listingGeneration) return;
      for (const file of list.files) rows.push(fileRow(file));
      page = list.pagination.page;
      nextPage = list.pagination.nextPage || null;
    }
  } catch (error) {
    if (generation === listingGeneration) reportError(error);
    return;
  }
  if (generation !== listingGeneration || folderId !== state.folderId) return;
  state.page = page;
  state.nextPage = nextPage;
  $("file-rows").replaceChildren(...rows);
  $("empty-folder").hidden = rows.length > 0;
  $("load-more").hidden = !nextPage;
}

/** Appends the next page (the "Load more" button and scrolling to the end). */
async function loadPage() {
  if (state.loading || !state.nextPage) return;
  state.loading = true;
  const generation = listingGeneration;
  try {
    const list = await api("GET", `/v1/files?parentId=${encodeURIComponent(state.folderId)}&page=${state.nextPage}&limit=200`);
    if (generation !== listingGeneration) return;
    state.page = list.pagination.page;
    state.nextPage = list.pagination.nextPage || null;
    const rows = $("file-rows");
    for (const file of list.files) rows.append(fileRow(file));
    $("empty-folder").hidden = rows.children.length > 0;
    $("load-more").hidden = !state.nextPage;
  } catch (error) {
    reportError(error);
  } finally {
    state.loading = false;
  }
}

function fileRow(file) {
  const isFolder = file.mimeType === FOLDER;
  const name = isFolder
    ? element("a", { href: "#", onclick: (event) => { event.preventDefault(); openFolder(file.id, [...state.path, { id: file.id, name: file.name }]); } }, file.name)
    : element("a", { href: "#", title: "Show revisions", onclick: (event) => { event.preventDefault(); openRevisions(file); } }, file.name);
  const nameCell = element("td", { class: "name" }, name);
  // Marked: what the user shares (with people or a link), and the share someone gave them (its owner named).
  const mine = !file.owner || file.owner.username === session.username();
  if (file.shared && mine) nameCell.append(element("span", { class: "badge shared" }, "Shared"));
  if (file.shared && !mine) nameCell.append(element("span", { class: "badge shared", title: `Shared with you by ${file.owner.username}` }, `from ${file.owner.username}`));
  const actions = element("td", { class: "actions" });
  const can = file.capabilities || {};
  if (can.canShare) actions.append(element("button", { type: "button", class: "small", onclick: () => openShare(file), "aria-label": `Share ${file.name}` }, "Share"));
  if (!isFolder) actions.append(element("button", { type: "button", class: "small", onclick: () => download(file.downloadUrl, file.name).catch(reportError), "aria-label": `Download ${file.name}` }, "Download"));
  actions.append(
    element("button", { type: "button", class: "small", onclick: () => renameItem(file), "aria-label": `Rename ${file.name}` }, "Rename"),
    element("button", { type: "button", class: "small", onclick: () => moveItem(file), "aria-label": `Move ${file.name}` }, "Move"),
  );
  if (!isFolder) actions.append(element("button", { type: "button", class: "small", onclick: () => openRevisions(file), "aria-label": `Revisions of ${file.name}` }, "Revisions"));
  actions.append(element("button", { type: "button", class: "small danger", onclick: () => deleteItem(file), "aria-label": `Delete ${file.name}` }, "Delete"));
  return element("tr", { "data-id": file.id, "data-name": file.name },
    element("td", { class: "icon", "aria-hidden": "true" }, iconFor(file)),
    nameCell,
    element("td", { class: "size" }, isFolder ? "—" : formatSize(file.size)),
    element("td", { class: "date" }, formatDate(file.modifiedAt)),
    actions);
}

async function createFolder() {
  const name = await ask("New folder", "Name");
  if (!name) return;
  try {
    await api("POST", "/v1/files", { json: { name, mimeType: FOLDER, parentId: state.folderId } });
    await reloadFolder();
  } catch (error) { reportError(error); }
}

async function renameItem(file) {
  const name = await ask(`Rename ${file.name}`, "New name", file.name);
  if (!name || name === file.name) return;
  try {
    await api("PATCH", `/v1/files/${file.id}`, { json: { name } });
    await reloadFolder();
  } catch (error) { reportError(error); }
}

async function deleteItem(file, confirmed = false) {
  try {
    await api("DELETE", `/v1/files/${file.id}`);
    showAlert(`Moved “${file.name}” to the trash.`, "info");
    await reloadFolder();
  } catch (error) {
    // The server's mass-deletion breaker paused this browser's deletions: ask once, then go on.
    if (error instanceof APIError && error.code === "mass_deletion_paused" && !confirmed) {
      if (!confirm(`You have deleted many files in a short time, so the server paused deletions.\n\nDelete “${file.name}” and go on deleting?`)) return;
      try { await api("POST", "/v1/trash/confirm"); } catch (confirmError) { reportError(confirmError); return; }
      return deleteItem(file, true);
    }
    reportError(error);
  }
}

// Move: a small folder browser.
const mover = { file: null, folderId: "root", path: [] };
async function moveItem(file) {
  mover.file = file;
  mover.folderId = "root";
  mover.path = [];
  await renderMover();
  $("move-dialog").showModal();
}

async function renderMover() {
  const crumbs = $("move-breadcrumbs");
  crumbs.replaceChildren();
  [{ id: "root", name: "My Drive" }, ...mover.path].forEach((crumb, index, all) => {
    if (index > 0) crumbs.append(element("span", { class: "sep" }, "›"));
    crumbs.append(index === all.length - 1 ? element("span", {}, crumb.name)
      : element("a", { href: "#", onclick: (event) => { event.preventDefault(); mover.folderId = crumb.id; mover.path = mover.path.slice(0, index); renderMover(); } }, crumb.name));
  });
  const list = $("move-folders");
  list.replaceChildren();
  try {
    const folders = await api("GET", `/v1/files?parentId=${encodeURIComponent(mover.folderId)}&limit=1000`);
    for (const folder of folders.files.filter((f) => f.mimeType === FOLDER && f.id !== mover.file.id)) {
      list.append(element("li", {}, element("button", { type: "button", onclick: () => { mover.folderId = folder.id; mover.path.push({ id: folder.id, name: folder.name }); renderMover(); } }, iconFor(folder), ` ${folder.name}`)));
    }
  } catch (error) { reportError(error); }
}

async function moveHere() {
  $("move-dialog").close();
  try {
    await api("PATCH", `/v1/files/${mover.file.id}`, { json: { parentId: mover.folderId } });
    await reloadFolder();
  } catch (error) { reportError(error); }
}

// ---------------------------------------------------------------- trash

async function openTrash() {
  show("trash");
  const rows = $("trash-rows");
  rows.replaceChildren();
  try {
    const list = await api("GET", "/v1/trash?limit=1000");
    for (const file of list.files) {
      rows.append(element("tr", { "data-id": file.id, "data-name": file.name },
        element("td", { class: "icon", "aria-hidden": "true" }, iconFor(file)),
        element("td", { class: "name" }, file.name),
        element("td", { class: "size" }, file.mimeType === FOLDER ? "—" : formatSize(file.size)),
        element("td", { class: "date" }, formatDate(file.modifiedAt)),
        element("td", { class: "actions" }, element("button", { type: "button", class: "small", onclick: () => restoreFromTrash(file), "aria-label": `Restore ${file.name}` }, "Restore"))));
    }
    $("empty-trash").hidden = list.files.length > 0;
    await showDeletionPauses();
  } catch (error) { reportError(error); }
  if (!$("restore-since").value) $("restore-since").value = localInputValue(new Date(Date.now() - 3600 * 1000));
}

// The mass-deletion breaker: devices whose deletions the server paused until the user confirms.
async function showDeletionPauses() {
  const { paused } = await api("GET", "/v1/trash/paused");
  $("deletion-paused").hidden = paused.length === 0;
  $("deletion-paused-text").textContent = paused.map((pause) =>
    `${pause.deviceName ? `“${pause.deviceName}”` : "A device"} deleted ${pause.deletions} items within an hour, so the server paused its deletions (${formatDate(pause.pausedAt)}).`).join(" ");
}

async function confirmDeletions() {
  try {
    const { paused } = await api("POST", "/v1/trash/confirm");
    showAlert(paused.length ? "Confirmed: those devices' deletions go on." : "No deletions were paused.", "info");
    await showDeletionPauses();
  } catch (error) { reportError(error); }
}

async function restoreSince(event) {
  event.preventDefault();
  const since = new Date($("restore-since").value);
  if (isNaN(since)) { showAlert("Pick a date and time."); return; }
  if (!confirm(`Restore everything trashed since ${since.toLocaleString()}?`)) return;
  try {
    const result = await api("POST", "/v1/trash/restore", { json: { since: since.toISOString().replace(/\.\d{3}Z$/, "Z") } });
    showAlert(result.restored ? `Restored ${result.restored} item${result.restored === 1 ? "" : "s"} (${result.items} in all).` : "Nothing was trashed since then.", "info");
    await openTrash();
  } catch (error) { reportError(error); }
}

/** A date as a datetime-local input takes it (local time, to the minute). */
function localInputValue(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

async function restoreFromTrash(file) {
  try {
    await api("POST", `/v1/files/${file.id}/untrash`);
    showAlert(`Restored “${file.name}”.`, "info");
    await openTrash();
  } catch (error) { reportError(error); }
}

// ---------------------------------------------------------------- settings: app passwords

async function openSettings() {
  show("settings");
  $("app-password-new").hidden = true;
  await loadAppPasswords();
}

async function loadAppPasswords() {
  const rows = $("app-password-rows");
  try {
    const list = await api("GET", "/v1/auth/app-passwords");
    rows.replaceChildren(...list.appPasswords.map((entry) => element("tr", { "data-id": entry.id, "data-name": entry.label },
      element("td", { class: "name" }, entry.label),
      element("td", { class: "date" }, formatDate(entry.createdAt)),
      element("td", { class: "date" }, entry.lastUsedAt ? formatDate(entry.lastUsedAt) : "never"),
      element("td", { class: "actions" }, element("button", { type: "button", class: "small", onclick: () => revokeAppPassword(entry), "aria-label": `Revoke ${entry.label}` }, "Revoke")))));
    $("no-app-passwords").hidden = list.appPasswords.length > 0;
  } catch (error) { reportError(error); }
}

async function createAppPassword(event) {
  event.preventDefault();
  const label = $("app-password-label").value.trim();
  if (!label) { showAlert("Give the app password a label: what it is for."); return; }
  $("app-password-create").disabled = true;
  try {
    const made = await api("POST", "/v1/auth/app-passwords", { json: { label } });
    $("app-password-new-label").textContent = made.label;
    $("app-password-secret").textContent = made.password;
    $("app-password-new").hidden = false;
    $("app-password-label").value = "";
    await loadAppPasswords();
  } catch (error) { reportError(error); } finally { $("app-password-create").disabled = false; }
}

async function revokeAppPassword(entry) {
  if (!confirm(`Revoke the app password “${entry.label}”? Apps using it will be refused.`)) return;
  try {
    await api("DELETE", `/v1/auth/app-passwords/${encodeURIComponent(entry.id)}`);
    showAlert(`Revoked “${entry.label}”.`, "info");
    $("app-password-new").hidden = true;
    await loadAppPasswords();
  } catch (error) { reportError(error); }
}

// ---------------------------------------------------------------- revisions

async function openRevisions(file) {
  state.revisionsOf = file;
  $("revisions-name").textContent = file.name;
  show("revisions");
  const list = $("revision-list");
  list.replaceChildren();
  try {
    const [current, revisions] = await Promise.all([api("GET", `/v1/files/${file.id}`), api("GET", `/v1/files/${file.id}/revisions?limit=1000`)]);
    state.revisionsOf = current;
    for (const revision of revisions.revisions) {
      const isCurrent = revision.revisionId === current.revisionId;
      list.append(element("li", { "data-revision": revision.revisionId },
        element("span", { class: "when" }, `Modified ${formatDate(revision.modifiedAt)}`, isCurrent ? element("span", { class: "badge" }, "Current version") : ""),
        element("span", { class: "muted" }, formatSize(revision.size)),
        element("button", { type: "button", class: "small", onclick: () => download(revision.downloadUrl, current.name).catch(reportError) }, "Open"),
        isCurrent ? "" : element("button", { type: "button", class: "small", onclick: () => restoreRevision(current, revision) }, "Restore")));
    }
  } catch (error) { reportError(error); }
}

async function restoreRevision(file, revision) {
  try {
    await api("POST", `/v1/files/${file.id}/revisions/${revision.revisionId}/restore`);
    showAlert("Restored; it is now the current version.", "info");
    await openRevisions(file);
  } catch (error) { reportError(error); }
}

// ---------------------------------------------------------------- uploads (the seed's resumable protocol)

const uploads = [];
let uploading = false;

/** A stable key per picked file, so picking the same file again after a reload resumes its session. */
function fingerprint(file, parentId) { return `nimbus.upload:${parentId}:${file.name}:${file.size}:${file.lastModified}`; }

async function enqueue(files) {
  const existing = new Set([...$("file-rows").children].map((row) => row.dataset.name));
  for (const file of files) {
    let onConflict = "fail";
    if (existing.has(file.name)) {
      onConflict = await askClash(file.name);
      if (!onConflict) continue;
    }
    const entry = { file, parentId: state.folderId, onConflict, controller: new AbortController(), uploadId: null, cancelled: false };
    entry.progress = element("progress", { max: 1, value: 0, "aria-label": `Progress of ${file.name}` });
    entry.status = element("span", { class: "muted" }, "Waiting…");
    entry.cancel = element("button", { type: "button", class: "small", onclick: () => cancelUpload(entry), "aria-label": `Cancel ${file.name}` }, "Cancel");
    entry.item = element("li", { "data-name": file.name },
      element("div", { class: "row" }, element("span", { class: "name" }, file.name), entry.cancel), entry.progress, entry.status);
    $("upload-list").append(entry.item);
    uploads.push(entry);
  }
  if (!$("upload-dialog").open) $("upload-dialog").showModal();
  runUploads();
}

function askClash(name) {
  return new Promise((resolve) => {
    const dialog = $("clash-dialog");
    $("clash-text").textContent = `“${name}” already exists in this location. Replacing it keeps the old content as a revision.`;
    dialog.onclose = () => {
      if (dialog.returnValue !== "upload") return resolve(null);
      resolve(dialog.querySelector("input[name=clash]:checked").value);
    };
    dialog.showModal();
  });
}

async function runUploads() {
  if (uploading) return;
  uploading = true;
  try {
    while (uploads.length) {
      const entry = uploads.shift();
      if (!entry.cancelled) await upload(entry).catch((error) => {
        if (entry.cancelled) return;
        entry.status.textContent = error instanceof APIError ? error.message : `Failed: ${error.message}`;
        entry.cancel.hidden = true;
      });
    }
  } finally { uploading = false; }
}

async function upload(entry) {
  const { file, parentId } = entry;
  const key = fingerprint(file, parentId);
  let requestId = localStorage.getItem(key);
  if (!requestId) { requestId = crypto.randomUUID(); localStorage.setItem(key, requestId); }
  entry.status.textContent = "Starting…";
  const begin = () => api("POST", `/v1/upload?uploadType=resumable&onConflict=${entry.onConflict}`, {
    json: { requestId, name: file.name, mimeType: file.type || "application/octet-stream", parentId, size: file.size },
    signal: entry.controller.signal,
  });
  let session;
  try {
    session = await begin();
  } catch (error) {
    // The name appeared after the list was read (another device, another tab): ask now, as for a listed clash.
    if (!(error instanceof APIError) || error.code !== "name_conflict" || entry.onConflict !== "fail") throw error;
    const choice = await askClash(file.name);
    if (!choice) { entry.cancelled = true; entry.cancel.hidden = true; entry.status.textContent = "Skipped"; localStorage.removeItem(key); return; }
    entry.onConflict = choice;
    session = await begin();
  }
  entry.uploadId = session.uploadId;
  const resumed = session.chunksProcessed > 0 && !session.file ? ` · resumed from chunk ${session.chunksProcessed + 1}` : "";
  if (resumed) entry.status.textContent = `Resuming from chunk ${session.chunksProcessed + 1} of ${session.totalChunks}`;
  while (!session.file) {
    const k = session.chunksProcessed;
    const start = k * session.chunkSize;
    const end = Math.min(start + session.chunkSize, file.size);
    const response = await api("PUT", session.uploadUrl, {
      body: file.slice(start, end), headers: { "Content-Range": `bytes ${start}-${end - 1}/${file.size}` }, raw: true, signal: entry.controller.signal,
    });
    const data = await response.json().catch(() => null);
    if (response.status !== 308 && response.status !== 201) throw new APIError(response.status, data);
    session = data;
    entry.progress.value = session.totalChunks ? session.chunksProcessed / session.totalChunks : 1;
    const sent = Math.min(session.chunksProcessed * session.chunkSize, file.size);
    entry.status.textContent = `${session.chunksProcessed} of ${session.totalChunks} chunks · ${formatSize(sent)} of ${formatSize(file.size)}${resumed}`;
  }
  localStorage.removeItem(key);
  entry.progress.value = 1;
  entry.status.textContent = `Done · ${formatSize(file.size)}${resumed}`;
  entry.cancel.hidden = true;
  if (state.view === "files" && state.folderId === parentId) await reloadFolder();
}

async function cancelUpload(entry) {
  entry.cancelled = true;
  entry.controller.abort();
  entry.cancel.hidden = true;
  entry.status.textContent = "Cancelled";
  localStorage.removeItem(fingerprint(entry.file, entry.parentId));
  if (entry.uploadId) await api("DELETE", `/v1/upload/${entry.uploadId}`).catch(() => {});
}

// ---------------------------------------------------------------- live updates from /v1/events

const events = {
  controller: null,
  async start() {
    this.stop();
    const controller = new AbortController();
    this.controller = controller;
    let delay = 1000;
    while (!controller.signal.aborted && session.tokens) {
      try {
        const response = await api("GET", "/v1/events", { raw: true, signal: controller.signal });
        if (!response.ok || !response.body) throw new Error(`events ${response.status}`);
        delay = 1000;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let boundary;
          while ((boundary = buffer.indexOf("\n\n")) >= 0) {
            const message = buffer.slice(0, boundary);
            buffer = buffer.slice(boundary + 2);
            if (message.split("\n").includes("event: change")) changed();
          }
        }
      } catch (error) {
        if (controller.signal.aborted) return;
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 30000);
    }
  },
  stop() { if (this.controller) this.controller.abort(); this.controller = null; },
};

let changeTimer = null;
function changed() {
  clearTimeout(changeTimer);
  changeTimer = setTimeout(() => {
    if (state.view === "files") reloadFolder();
    else if (state.view === "trash") openTrash();
  }, 150);
}

// ---------------------------------------------------------------- wiring

async function signIn(event) {
  event.preventDefault();
  const username = $("login-username").value.trim();
  const password = $("login-password").value;
  $("login-submit").disabled = true;
  try {
    const response = await fetch("/v1/auth/login", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ username, password, deviceName: "Web browser" }),
    });
    const data = await response.json().catch(() => null);
    if (!response.ok) throw new APIError(response.status, data);
    session.tokens = data;
    sessionStorage.setItem("nimbus.username", username);
    $("alert").hidden = true;
    $("login-password").value = "";
    await openFolder("root", []);
    events.start();
  } catch (error) {
    reportError(error);
  } finally {
    $("login-submit").disabled = false;
  }
}

// ---------------------------------------------------------------- sharing

const sharing = { file: null };

/** The share dialog: people with their roles, links with their options, and forms to add either. */
async function openShare(file) {
  sharing.file = file;
  $("share-title").textContent = `Share “${file.name}”`;
  $("link-new").hidden = true;
  $("link-access").querySelector('option[value="upload"]').disabled = file.mimeType !== FOLDER;
  await renderShare();
  if (!$("share-dialog").open) $("share-dialog").showModal();
  $("share-user").focus();
}

async function renderShare() {
  const file = sharing.file;
  let list;
  try { list = await api("GET", `/v1/files/${file.id}/grants`); } catch (error) { reportError(error); return; }
  const people = $("share-people");
  people.replaceChildren();
  for (const grant of list.grants) {
    const role = element("select", { "aria-label": `Role of ${grant.grantee.username}`, onchange: (event) => changeRole(grant, event.target.value) },
      ...["viewer", "editor", "manager"].map((value) => element("option", value === grant.role ? { value, selected: "" } : { value }, value)));
    const state = grant.state === "accepted" ? "" : ` (${grant.state})`;
    const until = grant.expiresAt ? `, until ${formatDate(grant.expiresAt)}` : "";
    people.append(element("li", { "data-name": grant.grantee.username },
      element("span", { class: "who" }, `${grant.grantee.username}${state}${until}`), role,
      element("button", { type: "button", class: "small danger", onclick: () => removeGrant(grant), "aria-label": `Stop sharing with ${grant.grantee.username}` }, "Remove")));
  }
  if (!list.grants.length) people.append(element("li", { class: "muted" }, "Only you (and whoever shares the folders above it)."));
  const links = $("share-links");
  links.replaceChildren();
  for (const link of list.links) {
    const details = [`anyone can ${link.access === "upload" ? "only upload" : link.access}`];
    if (link.passwordSet) details.push("password");
    if (link.expiresAt) details.push(`until ${formatDate(link.expiresAt)}`);
    if (link.maxDownloads) details.push(`${link.downloads}/${link.maxDownloads} downloads`);
    links.append(element("li", { "data-id": link.id },
      element("span", { class: "who" }, details.join(", ")),
      element("button", { type: "button", class: "small", onclick: () => showLink(link.id), "aria-label": "Show the link" }, "Show"),
      element("button", { type: "button", class: "small danger", onclick: () => revokeLink(link), "aria-label": "Turn the link off" }, "Turn off")));
  }
  if (!list.links.length) links.append(element("li", { class: "muted" }, "No links."));
}

/** The end of the day chosen in a date field, or null. */
function endOfDay(value) {
  if (!value) return null;
  const date = new Date(`${value}T23:59:59`);
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}

async function addGrant(event) {
  event.preventDefault();
  const body = { user: $("share-user").value.trim(), role: $("share-role").value };
  const expiresAt = endOfDay($("share-expires").value);
  if (expiresAt) body.expiresAt = expiresAt;
  try {
    await api("POST", `/v1/files/${sharing.file.id}/grants`, { json: body });
    $("share-user").value = "";
    showAlert(`Shared with ${body.user}; they will see it under “Shared with me”.`, "info");
    await renderShare();
    await reloadFolder();
  } catch (error) {
    // An unknown user answers as an invisible item would: say it in the user's words.
    if (error instanceof APIError && error.status === 404) showAlert(`There is no user “${body.user}” here (or you cannot share this).`);
    else reportError(error);
  }
}

async function changeRole(grant, role) {
  try { await api("PATCH", `/v1/grants/${grant.id}`, { json: { role } }); } catch (error) { reportError(error); }
  await renderShare();
}

async function removeGrant(grant) {
  if (!confirm(`Stop sharing “${sharing.file.name}” with ${grant.grantee.username}? Their copy leaves their drive; your files stay.`)) return;
  try { await api("DELETE", `/v1/grants/${grant.id}`); } catch (error) { reportError(error); }
  await renderShare();
  await reloadFolder();
}

async function createLink(event) {
  event.preventDefault();
  const body = { access: $("link-access").value };
  const password = $("link-password").value;
  if (password) body.password = password;
  const expiresAt = endOfDay($("link-expires").value);
  if (expiresAt) body.expiresAt = expiresAt;
  const max = $("link-max").value;
  if (max) body.maxDownloads = Number(max);
  try {
    const link = await api("POST", `/v1/files/${sharing.file.id}/links`, { json: body });
    $("link-password").value = "";
    revealLink(link.url);
    await renderShare();
    await reloadFolder();
  } catch (error) { reportError(error); }
}

/** One link's address (asked for by id: lists never carry it). */
async function showLink(id) {
  try { revealLink((await api("GET", `/v1/links/${id}`)).url); } catch (error) { reportError(error); }
}

function revealLink(url) {
  $("link-url").textContent = url;
  $("link-new").hidden = false;
}

async function copyLink() {
  const url = $("link-url").textContent;
  try {
    await navigator.clipboard.writeText(url);
    showAlert("Link copied.", "info");
  } catch {
    // No clipboard (a plain-HTTP page): select it for the user to copy.
    const range = document.createRange();
    range.selectNodeContents($("link-url"));
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    showAlert("Select-and-copy the link shown.", "info");
  }
}

async function revokeLink(link) {
  if (!confirm("Turn this link off? Anyone using it is refused from now on.")) return;
  try { await api("DELETE", `/v1/links/${link.id}`); } catch (error) { reportError(error); }
  $("link-new").hidden = true;
  await renderShare();
  await reloadFolder();
}

/** What others shared with the user: pending ones to accept or decline, accepted ones to open or leave. */
async function openSharedWithMe() {
  show("shared-with-me");
  let list;
  try { list = await api("GET", "/v1/shares/incoming"); } catch (error) { reportError(error); return; }
  const rows = list.shares.filter((share) => share.grant.state !== "declined").map((share) => {
    const actions = element("td", { class: "actions" });
    const grant = share.grant;
    if (grant.state === "pending") {
      actions.append(
        element("button", { type: "button", class: "small primary", onclick: () => answerShare(grant, "accept"), "aria-label": `Accept ${share.item.name}` }, "Accept"),
        element("button", { type: "button", class: "small", onclick: () => answerShare(grant, "decline"), "aria-label": `Decline ${share.item.name}` }, "Decline"));
    } else {
      if (share.item.mimeType === FOLDER) {
        actions.append(element("button", { type: "button", class: "small", onclick: () => openFolder(share.item.id, [{ id: share.item.id, name: share.item.name }]), "aria-label": `Open ${share.item.name}` }, "Open"));
      }
      actions.append(element("button", { type: "button", class: "small danger", onclick: () => answerShare(grant, "decline"), "aria-label": `Leave ${share.item.name}` }, "Leave"));
    }
    return element("tr", { "data-name": share.item.name, "data-state": grant.state },
      element("td", { class: "icon", "aria-hidden": "true" }, iconFor(share.item)),
      element("td", { class: "name" }, share.item.name, grant.state === "pending" ? element("span", { class: "badge shared" }, "new") : ""),
      element("td", {}, share.owner.username),
      element("td", {}, grant.role),
      actions);
  });
  $("incoming-rows").replaceChildren(...rows);
  $("no-incoming").hidden = rows.length > 0;
}

async function answerShare(grant, answer) {
  if (answer === "decline" && grant.state === "accepted" && !confirm("Leave this share? It leaves your drive; its owner's files stay, and it can be accepted again.")) return;
  try {
    await api("POST", `/v1/shares/incoming/${grant.id}/${answer}`);
    if (answer === "accept") showAlert("Accepted: it is in your drive now.", "info");
  } catch (error) { reportError(error); }
  await openSharedWithMe();
}

/** What the user shares: each grant and each link, with the item it is on. */
async function openSharedByMe() {
  show("shared-by-me");
  let grants, links;
  try {
    grants = (await api("GET", "/v1/grants")).grants;
    links = (await api("GET", "/v1/links")).links;
  } catch (error) { reportError(error); return; }
  const items = new Map();
  const item = async (id) => {
    if (!items.has(id)) items.set(id, await api("GET", `/v1/files/${id}`).catch(() => null));
    return items.get(id);
  };
  const rows = [];
  for (const entry of [...grants.map((grant) => ({ grant })), ...links.map((link) => ({ link }))]) {
    const file = await item(entry.grant ? entry.grant.itemId : entry.link.itemId);
    if (!file) continue;
    const actions = element("td", { class: "actions" },
      element("button", { type: "button", class: "small", onclick: () => openShare(file), "aria-label": `Manage sharing of ${file.name}` }, "Manage"));
    rows.push(element("tr", { "data-name": file.name },
      element("td", { class: "icon", "aria-hidden": "true" }, iconFor(file)),
      element("td", { class: "name" }, file.name),
      element("td", {}, entry.grant ? `${entry.grant.grantee.username}${entry.grant.state === "accepted" ? "" : ` (${entry.grant.state})`}` : "anyone with the link"),
      element("td", {}, entry.grant ? entry.grant.role : `link: ${entry.link.access}`),
      actions));
  }
  $("outgoing-rows").replaceChildren(...rows);
  $("no-outgoing").hidden = rows.length > 0;
}

function setUp() {
  $("login-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut("Signed out."));
  $("home-link").addEventListener("click", (event) => { event.preventDefault(); if (session.tokens) openFolder("root", []); });
  $("new-folder").addEventListener("click", createFolder);
  $("upload-button").addEventListener("click", () => $("file-input").click());
  $("upload-more").addEventListener("click", () => $("file-input").click());
  $("upload-close").addEventListener("click", () => $("upload-dialog").close());
  $("file-input").addEventListener("change", (event) => { const files = [...event.target.files]; event.target.value = ""; enqueue(files); });
  $("trash-button").addEventListener("click", openTrash);
  $("confirm-deletions").addEventListener("click", confirmDeletions);
  $("restore-since-form").addEventListener("submit", restoreSince);
  $("settings-button").addEventListener("click", openSettings);
  $("back-from-settings").addEventListener("click", () => openFolder(state.folderId, state.path));
  $("app-password-form").addEventListener("submit", createAppPassword);
  $("back-to-files").addEventListener("click", () => openFolder(state.folderId, state.path));
  $("back-from-revisions").addEventListener("click", () => openFolder(state.folderId, state.path));
  $("load-more").addEventListener("click", loadPage);
  $("move-cancel").addEventListener("click", () => $("move-dialog").close());
  $("move-here").addEventListener("click", moveHere);
  $("share-form").addEventListener("submit", addGrant);
  $("link-form").addEventListener("submit", createLink);
  $("link-copy").addEventListener("click", copyLink);
  $("share-close").addEventListener("click", () => { $("share-dialog").close(); if (state.view === "shared-by-me") openSharedByMe(); });
  $("shared-with-me-button").addEventListener("click", openSharedWithMe);
  $("shared-by-me-button").addEventListener("click", openSharedByMe);
  $("back-from-shared-with-me").addEventListener("click", () => openFolder("root", []));
  $("back-from-shared-by-me").addEventListener("click", () => openFolder("root", []));
  const zone = $("drop-zone");
  zone.addEventListener("dragover", (event) => { event.preventDefault(); zone.classList.add("dragging"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("dragging");
    const files = [...(event.dataTransfer && event.dataTransfer.files || [])];
    if (files.length) enqueue(files);
  });
  // Incremental loading for big folders: the next page loads as the end of the list comes into view.
  new IntersectionObserver((entries) => { if (entries.some((e) => e.isIntersecting) && state.view === "files") loadPage(); })
    .observe($("load-more-sentinel"));
  if (session.tokens) { openFolder("root", []); events.start(); } else { show("login"); $("login-username").focus(); }
}

document.addEventListener("DOMContentLoaded", setUp);
