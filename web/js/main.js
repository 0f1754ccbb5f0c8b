// Nimbus web app: plain ES modules, no build step, no external assets. This module wires the page: signing in,
// the places and their addresses (#/files/ID, #/search?q=…), the search field, uploads, keyboard shortcuts, live
// updates from /v1/events and the quota bar.
import { api, APIError, FOLDER, hooks, session } from "./api.js";
import { $, announce, ask, formatSize, reportError, showAlert, typing } from "./dom.js";
import { showRevisions, showSettings, showTrash, setUpAccount } from "./account.js";
import { browse, downloadItems, moveItems, open, rename, setUpBrowse, showFolder, showSearch, showStarred, star, trash } from "./browse.js";
import { showActivity, showHome } from "./places.js";
import { closePreview, openPreview, previewActions, previewing } from "./preview.js";
import { openShare, setUpSharing, showShared } from "./sharing.js";
import { dropped, enqueue, pickedFolder, uploadHooks } from "./uploads.js";

const views = ["login", "files", "home", "starred", "shared", "activity", "search", "trash", "settings", "revisions"];
let place = null;

function show(view) {
  place = view;
  for (const name of views) $(`${name}-view`).hidden = name !== view;
  const signedIn = Boolean(session.tokens);
  document.body.classList.toggle("signed-in", signedIn);
  $("whoami").textContent = signedIn ? session.username : "";
  for (const link of document.querySelectorAll("#nav a[data-place]")) {
    if (link.dataset.place === view) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  $("bulk-bar").hidden = true;
  if (!["files", "search", "starred"].includes(view)) browse.active = null;
  closeNav();
}

/** Shows the place the address names. */
async function route() {
  if (!session.tokens) { show("login"); $("login-username").focus(); return; }
  const hash = location.hash || "#/files";
  const [path, query = ""] = hash.slice(1).split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query);
  closePreview();
  switch (parts[0]) {
    case "home": show("home"); document.title = "Home – Nimbus"; return showHome(open);
    case "starred": show("starred"); document.title = "Starred – Nimbus"; return showStarred();
    case "shared": show("shared"); document.title = "Shared – Nimbus"; return showShared(open);
    case "activity": show("activity"); document.title = "Activity – Nimbus"; return showActivity(open);
    case "trash": show("trash"); document.title = "Trash – Nimbus"; return showTrash();
    case "settings": show("settings"); document.title = "Settings – Nimbus"; return showSettings();
    case "revisions": show("revisions"); document.title = "Revisions – Nimbus"; return showRevisions(parts[1]);
    case "search": {
      show("search");
      const q = params.get("q") || "";
      if (document.activeElement !== $("search")) $("search").value = q;
      document.title = `${q || "Search"} – Nimbus`;
      return showSearch(q, params.get("type") || "");
    }
    default: show("files"); return showFolder(parts[1] || "root");
  }
}

/** Shows the current place again (after a change here or elsewhere), keeping scroll and selection. */
async function refresh() {
  switch (place) {
    case "files": return showFolder(browse.folderId);
    case "search": return route();
    case "starred": return showStarred();
    case "home": return showHome(open);
    case "activity": return showActivity(open);
    case "shared": return showShared(open);
    case "trash": return showTrash();
    default: return undefined;
  }
}
browse.refreshAll = async () => { await refresh(); await showQuota(); };
browse.go = (hash) => { if (location.hash === hash) route(); else location.hash = hash; };

async function showQuota() {
  try {
    const about = await api("GET", "/v1/about");
    const { used, limit } = about.quota;
    const bar = $("quota-bar");
    bar.max = limit || Math.max(used, 1);
    bar.value = used;
    bar.hidden = !limit;
    $("quota-text").textContent = limit ? `${formatSize(used)} of ${formatSize(limit)} used` : `${formatSize(used)} used`;
  } catch { /* the bar stays as it was */ }
}

// ---------------------------------------------------------------- signing in and out

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
    session.username = username;
    $("alert").hidden = true;
    $("login-password").value = "";
    await route();
    showQuota();
    events.start();
  } catch (error) {
    reportError(error);
  } finally {
    $("login-submit").disabled = false;
  }
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
hooks.sessionEnded = signOut;

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
  changeTimer = setTimeout(() => { if (["files", "trash", "starred", "home", "activity"].includes(place)) browse.refreshAll(); }, 150);
}

// ---------------------------------------------------------------- creating and uploading

async function createFolder() {
  $("new-dialog").close();
  const name = await ask("New folder", "Name");
  if (!name) return;
  try {
    await api("POST", "/v1/files", { json: { name, mimeType: FOLDER, parentId: browse.folderId } });
    announce(`Made the folder ${name}`);
    await browse.refreshAll();
  } catch (error) { reportError(error); }
}

/** Where uploads go: the folder shown, or the root from any other place. */
function uploadTarget() { return place === "files" ? browse.folderId : "root"; }

uploadHooks.names = () => new Set(place === "files" && browse.lists.files ? browse.lists.files.items.map((file) => file.name) : []);
uploadHooks.finished = async (parentId) => { if (place === "files" && browse.folderId === parentId) await browse.refreshAll(); else showQuota(); };

function pick(input) { $("new-dialog").close(); $(input).click(); }

// ---------------------------------------------------------------- the navigation on phones

function closeNav() {
  document.body.classList.remove("nav-open");
  $("menu-button").setAttribute("aria-expanded", "false");
}

function toggleNav() {
  const open = !document.body.classList.contains("nav-open");
  document.body.classList.toggle("nav-open", open);
  $("menu-button").setAttribute("aria-expanded", String(open));
  if (open) document.querySelector("#nav a")?.focus();
}

// ---------------------------------------------------------------- keyboard shortcuts (listed under ?)

function targets() {
  const list = browse.active;
  if (!list) return [];
  const chosen = list.selection();
  return chosen.length ? chosen : (list.focused() ? [list.focused()] : []);
}

function shortcut(event) {
  if (event.defaultPrevented || event.altKey) return;
  if (document.querySelector("dialog[open]:not(#upload-dialog)") || document.querySelector(".menu")) return;
  if (typing(event.target)) {
    if (event.key === "Escape" && event.target === $("search")) { $("search").blur(); browse.active?.focusIndex(browse.active.focus); }
    return;
  }
  const command = event.ctrlKey || event.metaKey;
  const list = browse.active;
  if (command && event.key.toLowerCase() === "a" && list) { event.preventDefault(); list.selectAll(); return; }
  if (command) return;
  const actions = {
    "/": () => { $("search").focus(); $("search").select(); },
    "?": () => $("help-dialog").showModal(),
    Escape: () => { if (!closePreview() && !list?.clearSelection()) closeNav(); },
    Delete: () => trash(targets()),
    "#": () => trash(targets()),
    s: () => { const files = targets(); if (files.length) star(files, !files.every((file) => file.starred)); },
    F2: () => { const [file] = targets(); if (file) rename(file); },
    d: () => downloadItems(targets()),
    m: () => moveItems(targets()),
    p: () => { const [file] = targets(); if (file) openPreview(file); },
    u: () => $("file-input").click(),
    N: () => createFolder(),
    ArrowDown: () => list?.focusIndex(list.focus),
    j: () => list?.focusIndex(list.focus),
  };
  const action = actions[event.key];
  if (!action) return;
  event.preventDefault();
  action();
}

// ---------------------------------------------------------------- wiring

function setUp() {
  setUpAccount();
  setUpBrowse();
  setUpSharing();
  $("login-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut("Signed out."));
  $("menu-button").addEventListener("click", toggleNav);
  // A place picked (even the one shown) puts the phone's places away.
  $("nav").addEventListener("click", (event) => { if (event.target.closest("a")) closeNav(); });
  $("new-button").addEventListener("click", () => $("new-dialog").showModal());
  $("new-fab").addEventListener("click", () => $("new-dialog").showModal());
  $("new-close").addEventListener("click", () => $("new-dialog").close());
  $("new-folder").addEventListener("click", createFolder);
  $("upload-files").addEventListener("click", () => pick("file-input"));
  $("upload-folder").addEventListener("click", () => pick("folder-input"));
  $("take-photo").addEventListener("click", () => pick("camera-input"));
  $("file-input").addEventListener("change", (event) => { const files = [...event.target.files]; event.target.value = ""; enqueue(files, uploadTarget()); });
  $("camera-input").addEventListener("change", (event) => { const files = [...event.target.files]; event.target.value = ""; enqueue(files, uploadTarget()); });
  $("folder-input").addEventListener("change", (event) => { const files = pickedFolder(event.target.files); event.target.value = ""; enqueue(files, uploadTarget()); });
  $("upload-more").addEventListener("click", () => $("file-input").click());
  $("upload-close").addEventListener("click", () => $("upload-dialog").close());
  $("help-button").addEventListener("click", () => $("help-dialog").showModal());
  $("help-close").addEventListener("click", () => $("help-dialog").close());
  $("preview-close").addEventListener("click", () => closePreview());
  previewActions.download = (file) => downloadItems([file]);
  previewActions.share = (file) => openShare(file, () => browse.refreshAll());
  previewActions.star = async (file) => { await star([file], !file.starred); file.starred = !file.starred; openPreview(file); };
  previewActions.revisions = (file) => browse.go(`#/revisions/${encodeURIComponent(file.id)}`);
  $("back-from-revisions").addEventListener("click", () => history.back());

  // Search as you type: the results place follows the field (one history entry per search, not per key).
  let typingTimer = null;
  $("search").addEventListener("input", () => {
    clearTimeout(typingTimer);
    typingTimer = setTimeout(() => {
      const q = $("search").value.trim();
      const hash = `#/search?q=${encodeURIComponent(q)}`;
      if (place === "search") history.replaceState(null, "", hash); else history.pushState(null, "", hash);
      route();
    }, 150);
  });
  $("search-form").addEventListener("submit", (event) => { event.preventDefault(); clearTimeout(typingTimer); browse.go(`#/search?q=${encodeURIComponent($("search").value.trim())}`); });
  for (const chip of document.querySelectorAll("#search-types button")) {
    chip.addEventListener("click", () => {
      const q = $("search").value.trim();
      browse.go(`#/search?q=${encodeURIComponent(q)}${chip.dataset.type ? `&type=${chip.dataset.type}` : ""}`);
    });
  }

  // Drop files or whole folders anywhere on a folder's page.
  const zone = $("files-view");
  zone.addEventListener("dragover", (event) => { event.preventDefault(); zone.classList.add("dragging"); });
  zone.addEventListener("dragleave", (event) => { if (!zone.contains(event.relatedTarget)) zone.classList.remove("dragging"); });
  zone.addEventListener("drop", async (event) => {
    event.preventDefault();
    zone.classList.remove("dragging");
    const entries = await dropped(event.dataTransfer);
    if (entries.length) enqueue(entries, browse.folderId);
  });
  document.addEventListener("keydown", shortcut);
  window.addEventListener("hashchange", route);
  if (session.tokens) { route(); showQuota(); events.start(); } else { show("login"); $("login-username").focus(); }
}

document.addEventListener("DOMContentLoaded", setUp);
