// Sharing: the share dialog (people with their roles, links with their options), and the Shared place — what
// others shared with me (to accept, open or leave) and what I share.
import { api, APIError, FOLDER } from "./api.js";
import { $, element, formatDate, iconFor, reportError, showAlert } from "./dom.js";

const sharing = { file: null, changed: () => {} };

/** Opens the share dialog for `file`; `changed()` is called after anything changed. */
export async function openShare(file, changed = () => {}) {
  sharing.file = file;
  sharing.changed = changed;
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
    sharing.changed();
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
  sharing.changed();
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
    sharing.changed();
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
  sharing.changed();
}

/** The Shared place: what others shared with me, then what I share. `open(file)` opens an accepted share. */
export async function showShared(open) {
  let incoming, grants, links;
  try {
    [incoming, grants, links] = await Promise.all([api("GET", "/v1/shares/incoming"), api("GET", "/v1/grants"), api("GET", "/v1/links")]);
  } catch (error) { reportError(error); return; }
  const rows = incoming.shares.filter((share) => share.grant.state !== "declined").map((share) => {
    const actions = element("td", { class: "actions" });
    const grant = share.grant;
    if (grant.state === "pending") {
      actions.append(
        element("button", { type: "button", class: "small primary", onclick: () => answerShare(grant, "accept", open), "aria-label": `Accept ${share.item.name}` }, "Accept"),
        element("button", { type: "button", class: "small", onclick: () => answerShare(grant, "decline", open), "aria-label": `Decline ${share.item.name}` }, "Decline"));
    } else {
      actions.append(element("button", { type: "button", class: "small", onclick: () => open(share.item), "aria-label": `Open ${share.item.name}` }, "Open"));
      actions.append(element("button", { type: "button", class: "small danger", onclick: () => answerShare(grant, "decline", open), "aria-label": `Leave ${share.item.name}` }, "Leave"));
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

  const items = new Map();
  const item = async (id) => {
    if (!items.has(id)) items.set(id, await api("GET", `/v1/files/${id}`).catch(() => null));
    return items.get(id);
  };
  const outgoing = [];
  for (const entry of [...grants.grants.map((grant) => ({ grant })), ...links.links.map((link) => ({ link }))]) {
    const file = await item(entry.grant ? entry.grant.itemId : entry.link.itemId);
    if (!file) continue;
    outgoing.push(element("tr", { "data-name": file.name },
      element("td", { class: "icon", "aria-hidden": "true" }, iconFor(file)),
      element("td", { class: "name" }, file.name),
      element("td", {}, entry.grant ? `${entry.grant.grantee.username}${entry.grant.state === "accepted" ? "" : ` (${entry.grant.state})`}` : "anyone with the link"),
      element("td", {}, entry.grant ? entry.grant.role : `link: ${entry.link.access}`),
      element("td", { class: "actions" },
        element("button", { type: "button", class: "small", onclick: () => openShare(file, () => showShared(open)), "aria-label": `Manage sharing of ${file.name}` }, "Manage"))));
  }
  $("outgoing-rows").replaceChildren(...outgoing);
  $("no-outgoing").hidden = outgoing.length > 0;
}

async function answerShare(grant, answer, open) {
  if (answer === "decline" && grant.state === "accepted" && !confirm("Leave this share? It leaves your drive; its owner's files stay, and it can be accepted again.")) return;
  try {
    await api("POST", `/v1/shares/incoming/${grant.id}/${answer}`);
    if (answer === "accept") showAlert("Accepted: it is in your drive now.", "info");
  } catch (error) { reportError(error); }
  await showShared(open);
}

export function setUpSharing() {
  $("share-form").addEventListener("submit", addGrant);
  $("link-form").addEventListener("submit", createLink);
  $("link-copy").addEventListener("click", copyLink);
  $("share-close").addEventListener("click", () => $("share-dialog").close());
}
