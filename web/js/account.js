// The account's own pages: the trash (with the mass-deletion breaker), app passwords, a file's revisions.
import { api, download, FOLDER } from "./api.js";
import { $, element, formatDate, formatSize, iconFor, reportError, showAlert } from "./dom.js";

export async function showTrash() {
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
    await showTrash();
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
    await showTrash();
  } catch (error) { reportError(error); }
}

export async function showSettings() {
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

export async function showRevisions(fileId) {
  const list = $("revision-list");
  list.replaceChildren();
  try {
    const [current, revisions] = await Promise.all([api("GET", `/v1/files/${fileId}`), api("GET", `/v1/files/${fileId}/revisions?limit=1000`)]);
    $("revisions-name").textContent = current.name;
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
    await showRevisions(file.id);
  } catch (error) { reportError(error); }
}

export function setUpAccount() {
  $("confirm-deletions").addEventListener("click", confirmDeletions);
  $("restore-since-form").addEventListener("submit", restoreSince);
  $("app-password-form").addEventListener("submit", createAppPassword);
}
