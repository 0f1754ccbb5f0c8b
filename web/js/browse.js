// The places that list files — a folder, search results, starred — and what can be done to files there: one at a
// time from a row's menu, or to a selection from the bulk bar (move, delete, download as zip, star).
import { allPages, api, APIError, download, fetchBlob, FOLDER, saveBlob } from "./api.js";
import { $, announce, ask, element, reportError, showAlert } from "./dom.js";
import { FileList } from "./list.js";
import { openPreview, closePreview } from "./preview.js";
import { openShare } from "./sharing.js";

export const browse = {
  lists: {},
  /** The list of the place shown now (for shortcuts and the bulk bar). */
  active: null,
  folderId: "root",
  folder: null,
  sort: JSON.parse(localStorage.getItem("nimbus.sort") || '{"key":"name","order":"asc"}'),
  generation: 0,
  /** Shows a place by its address (set by main.js). */
  go: (hash) => { location.hash = hash; },
  refreshAll: () => {},
};

function list(place, host, label, extra = {}) {
  if (!browse.lists[place]) {
    browse.lists[place] = new FileList($(host), {
      label, open, menu, changed: bulkBar, ...extra,
    });
  }
  return browse.lists[place];
}

/** Opens an item: a folder's page, or a file's preview. */
export function open(file) {
  if (file.mimeType === FOLDER) browse.go(`#/files/${encodeURIComponent(file.id)}`);
  else openPreview(file);
}

// ---------------------------------------------------------------- a folder

/** The folders from the root to `folder` (their names as the user sees them), for the breadcrumbs. */
async function trail(folder) {
  const crumbs = [];
  let current = folder;
  while (current && current.parentId) {
    crumbs.unshift(current);
    current = await api("GET", `/v1/files/${encodeURIComponent(current.parentId)}`).catch(() => null);
  }
  return crumbs;
}

function renderBreadcrumbs(crumbs) {
  const nav = $("breadcrumbs");
  const all = [{ id: "root", name: "My Drive" }, ...crumbs];
  const key = JSON.stringify(all.map((crumb) => [crumb.id, crumb.name]));
  if (nav.dataset.key === key) return;
  nav.dataset.key = key;
  nav.replaceChildren();
  all.forEach((crumb, index) => {
    if (index > 0) nav.append(element("span", { class: "sep", "aria-hidden": "true" }, "›"));
    if (index === all.length - 1) nav.append(element("span", { "aria-current": "page" }, crumb.name));
    else nav.append(element("a", { href: `#/files/${encodeURIComponent(index === 0 ? "root" : crumb.id)}` }, crumb.name));
  });
}

export async function showFolder(folderId) {
  const generation = ++browse.generation;
  const files = list("files", "files-list", "Files", {
    sort: browse.sort,
    onSort: (key) => {
      browse.sort = { key, order: browse.sort.key === key && browse.sort.order === "asc" ? "desc" : "asc" };
      localStorage.setItem("nimbus.sort", JSON.stringify(browse.sort));
      files.options.sort = browse.sort;
      files.renderHeader();
      showFolder(browse.folderId);
    },
  });
  browse.active = files;
  const changedFolder = browse.folderId !== folderId;
  browse.folderId = folderId;
  if (changedFolder) { files.selected.clear(); files.focus = 0; files.setItems([]); window.scrollTo(0, 0); }
  $("list-status").textContent = "Loading…";
  try {
    const folder = await api("GET", `/v1/files/${encodeURIComponent(folderId)}`);
    if (generation !== browse.generation) return;
    browse.folder = folder;
    document.title = folder.parentId ? `${folder.name} – Nimbus` : "My Drive – Nimbus";
    trail(folder).then((crumbs) => { if (generation === browse.generation) renderBreadcrumbs(crumbs); });
    const canAdd = !folder.capabilities || folder.capabilities.canEdit;
    $("new-button").disabled = !canAdd;
    const items = [];
    const { key, order } = browse.sort;
    await allPages(`/v1/files?parentId=${encodeURIComponent(folder.id)}&sort=${key}&order=${order}`, (page, pagination) => {
      items.push(...page);
      files.setItems(items.slice());
      $("list-status").textContent = items.length < pagination.totalItems ? `${items.length} of ${pagination.totalItems} loaded…` : "";
    }, { isCurrent: () => generation === browse.generation });
    if (generation !== browse.generation) return;
    $("empty-folder").hidden = items.length > 0;
    $("list-status").textContent = "";
  } catch (error) {
    if (generation === browse.generation) { $("list-status").textContent = ""; reportError(error); }
  }
}

// ---------------------------------------------------------------- search

let searchController = null;

/** Results for `query` (and `type`), as the user types: an older request still running is dropped. */
export async function showSearch(query, type) {
  const results = list("search", "search-list", "Search results", { showPath: true });
  browse.active = results;
  $("search-heading").textContent = query ? `Results for “${query}”` : "Search";
  for (const chip of document.querySelectorAll("#search-types button")) chip.setAttribute("aria-pressed", String((chip.dataset.type || "") === (type || "")));
  if (!query) { results.setItems([]); $("search-status").textContent = "Type part of a name."; return; }
  searchController?.abort();
  const controller = new AbortController();
  searchController = controller;
  $("search-status").textContent = "Searching…";
  try {
    const page = await api("GET", `/v1/search?q=${encodeURIComponent(query)}${type ? `&type=${type}` : ""}&limit=200`, { signal: controller.signal });
    if (controller.signal.aborted) return;
    results.setItems(page.files);
    const total = page.pagination.totalItems;
    $("search-status").textContent = total === 0 ? "Nothing has that in its name." : `${total} item${total === 1 ? "" : "s"}${total > page.files.length ? ` (the first ${page.files.length} shown)` : ""}`;
    announce($("search-status").textContent);
  } catch (error) {
    if (!controller.signal.aborted) { $("search-status").textContent = ""; reportError(error); }
  }
}

// ---------------------------------------------------------------- starred

export async function showStarred() {
  const starred = list("starred", "starred-list", "Starred");
  browse.active = starred;
  const items = [];
  try {
    await allPages("/v1/starred", (page) => { items.push(...page); starred.setItems(items.slice()); });
    $("no-starred").hidden = items.length > 0;
  } catch (error) { reportError(error); }
}

// ---------------------------------------------------------------- actions

/** The row menu: what can be done with one item. */
function menu(file, button) {
  const can = file.capabilities || {};
  const entries = [
    ["Open", () => open(file)],
    file.mimeType !== FOLDER ? ["Download", () => downloadItems([file])] : ["Download as zip", () => downloadItems([file])],
    can.canShare ? ["Share", () => openShare(file, () => browse.refreshAll())] : null,
    can.canRename ? ["Rename", () => rename(file)] : null,
    can.canRename ? ["Move", () => moveItems([file])] : null,
    [file.starred ? "Unstar" : "Star", () => star([file], !file.starred)],
    file.mimeType !== FOLDER ? ["Revisions", () => browse.go(`#/revisions/${encodeURIComponent(file.id)}`)] : null,
    can.canDelete ? ["Delete", () => trash([file])] : null,
  ].filter(Boolean);
  popup(button, entries, file.name);
}

/** A menu of `entries` ([label, action]) by `anchor`; arrows move, Enter picks, Escape closes. */
export function popup(anchor, entries, name) {
  document.querySelector(".menu")?.remove();
  const close = () => { holder.remove(); document.removeEventListener("click", outside, true); anchor.focus(); };
  const outside = (event) => { if (!holder.contains(event.target)) close(); };
  const holder = element("div", { class: "menu", role: "menu", "aria-label": `Actions for ${name}` },
    ...entries.map(([label, action]) => element("button", { type: "button", role: "menuitem", tabindex: "-1", class: label === "Delete" ? "danger" : "",
      onclick: () => { close(); action(); } }, label)));
  holder.addEventListener("keydown", (event) => {
    const items = [...holder.querySelectorAll("[role=menuitem]")];
    const at = items.indexOf(document.activeElement);
    if (event.key === "ArrowDown") { event.preventDefault(); items[(at + 1) % items.length].focus(); }
    else if (event.key === "ArrowUp") { event.preventDefault(); items[(at - 1 + items.length) % items.length].focus(); }
    else if (event.key === "Escape" || event.key === "Tab") { event.preventDefault(); close(); }
  });
  document.body.append(holder);
  const box = anchor.getBoundingClientRect();
  const width = Math.min(220, window.innerWidth - 16);
  holder.style.left = `${Math.max(8, Math.min(box.right - width, window.innerWidth - width - 8))}px`;
  holder.style.top = `${Math.min(box.bottom + window.scrollY + 4, window.scrollY + window.innerHeight - holder.offsetHeight - 8)}px`;
  holder.style.width = `${width}px`;
  setTimeout(() => document.addEventListener("click", outside, true));
  holder.querySelector("[role=menuitem]").focus();
}

export async function rename(file) {
  const name = await ask(`Rename ${file.name}`, "New name", file.name);
  if (!name || name === file.name) return;
  try {
    await api("PATCH", `/v1/files/${file.id}`, { json: { name } });
    announce(`Renamed to ${name}`);
    await browse.refreshAll();
  } catch (error) { reportError(error); }
}

/** Moves items to the trash; the mass-deletion breaker's pause is asked about once. */
export async function trash(files) {
  if (!files.length) return;
  if (files.length > 1 && !confirm(`Move ${files.length} items to the trash?`)) return;
  let confirmed = false;
  let moved = 0;
  for (const file of files) {
    for (;;) {
      try {
        await api("DELETE", `/v1/files/${file.id}`);
        moved++;
        break;
      } catch (error) {
        if (error instanceof APIError && error.code === "mass_deletion_paused" && !confirmed) {
          if (!confirm(`You have deleted many files in a short time, so the server paused deletions.\n\nDelete “${file.name}” and go on deleting?`)) return finish();
          confirmed = true;
          try { await api("POST", "/v1/trash/confirm"); } catch (confirmError) { reportError(confirmError); return finish(); }
          continue;
        }
        reportError(error);
        break;
      }
    }
  }
  return finish();
  async function finish() {
    if (moved) showAlert(moved === 1 ? `Moved “${files[0].name}” to the trash.` : `Moved ${moved} items to the trash.`, "info");
    browse.active?.clearSelection();
    closePreview();
    await browse.refreshAll();
  }
}

export async function star(files, on) {
  try {
    await Promise.all(files.map((file) => api(on ? "PUT" : "DELETE", `/v1/files/${file.id}/star`)));
    announce(on ? `Starred ${files.length === 1 ? files[0].name : `${files.length} items`}` : "Unstarred");
    await browse.refreshAll();
  } catch (error) { reportError(error); }
}

/** One file: its bytes. Anything else (a folder, several items): one zip, named after the folder or "Nimbus". */
export async function downloadItems(files) {
  if (!files.length) return;
  try {
    if (files.length === 1 && files[0].mimeType !== FOLDER) return await download(files[0].downloadUrl, files[0].name);
    showAlert(`Preparing a zip of ${files.length === 1 ? `“${files[0].name}”` : `${files.length} items`}…`, "info");
    const blob = await fetchBlob(`/v1/zip?ids=${files.map((file) => encodeURIComponent(file.id)).join(",")}`);
    saveBlob(blob, files.length === 1 ? `${files[0].name}.zip` : "Nimbus.zip");
  } catch (error) { reportError(error); }
}

// Move: a small folder browser.
const mover = { files: [], folderId: "root", path: [] };

export async function moveItems(files) {
  if (!files.length) return;
  mover.files = files;
  mover.folderId = "root";
  mover.path = [];
  $("move-title").textContent = files.length === 1 ? `Move “${files[0].name}” to…` : `Move ${files.length} items to…`;
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
  const holder = $("move-folders");
  holder.replaceChildren();
  const moving = new Set(mover.files.map((file) => file.id));
  try {
    const folders = await api("GET", `/v1/files?parentId=${encodeURIComponent(mover.folderId)}&limit=1000`);
    for (const folder of folders.files.filter((f) => f.mimeType === FOLDER && !moving.has(f.id))) {
      holder.append(element("li", {}, element("button", { type: "button", onclick: () => { mover.folderId = folder.id; mover.path.push({ id: folder.id, name: folder.name }); renderMover(); } }, folder.name)));
    }
  } catch (error) { reportError(error); }
}

async function moveHere() {
  $("move-dialog").close();
  try {
    for (const file of mover.files) await api("PATCH", `/v1/files/${file.id}`, { json: { parentId: mover.folderId } });
    announce(`Moved ${mover.files.length === 1 ? mover.files[0].name : `${mover.files.length} items`}`);
    browse.active?.clearSelection();
    await browse.refreshAll();
  } catch (error) { reportError(error); }
}

/** The bar of what can be done to the selection, shown while anything is selected. */
export function bulkBar() {
  const bar = $("bulk-bar");
  const chosen = browse.active ? browse.active.selection() : [];
  bar.hidden = chosen.length === 0;
  if (!chosen.length) return;
  $("bulk-count").textContent = `${chosen.length} selected`;
}

export function setUpBrowse() {
  $("move-cancel").addEventListener("click", () => $("move-dialog").close());
  $("move-here").addEventListener("click", moveHere);
  const chosen = () => (browse.active ? browse.active.selection() : []);
  $("bulk-download").addEventListener("click", () => downloadItems(chosen()));
  $("bulk-move").addEventListener("click", () => moveItems(chosen()));
  $("bulk-star").addEventListener("click", () => { const files = chosen(); star(files, !files.every((file) => file.starred)); });
  $("bulk-delete").addEventListener("click", () => trash(chosen()));
  $("bulk-clear").addEventListener("click", () => browse.active?.clearSelection());
  $("view-list").addEventListener("click", () => setMode("list"));
  $("view-grid").addEventListener("click", () => setMode("grid"));
  setMode(localStorage.getItem("nimbus.view") || "list");
}

function setMode(mode) {
  for (const item of Object.values(browse.lists)) item.setMode(mode);
  localStorage.setItem("nimbus.view", mode);
  $("view-list").setAttribute("aria-pressed", String(mode === "list"));
  $("view-grid").setAttribute("aria-pressed", String(mode === "grid"));
}
