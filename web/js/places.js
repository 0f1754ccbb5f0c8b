// Home (suggested: what I changed or opened lately, as the seed draws it: "You edited · Apr 25") and Activity (who
// did what, with which device, in words).
import { api, session } from "./api.js";
import { $, element, formatDate, iconFor, reportError, shortDate } from "./dom.js";
import { thumbnail } from "./thumbs.js";

const verbs = { created: "created", uploaded: "uploaded", edited: "edited", renamed: "renamed", moved: "moved", copied: "copied", trashed: "trashed", restored: "restored", deleted: "deleted", restoredVersion: "restored a version of" };

/** "You edited · Apr 25" for a file, from the newest event about it (or its modification time). */
function line(file, event) {
  if (!event) return `Modified · ${shortDate(file.modifiedAt)}`;
  const who = event.by.username === session.username ? "You" : event.by.username || "Someone";
  return `${who} ${verbs[event.action] || event.action} · ${shortDate(event.at)}`;
}

export async function showHome(open) {
  let recent, activity;
  try {
    [recent, activity] = await Promise.all([api("GET", "/v1/recent?limit=24"), api("GET", "/v1/activity?limit=200")]);
  } catch (error) { reportError(error); return; }
  const latest = new Map();
  for (const event of activity.events) if (!latest.has(event.file.id)) latest.set(event.file.id, event);
  const cards = recent.files.map((file) => {
    const picture = element("span", { class: "picture" }, iconFor(file, 56));
    thumbnail(file, 256).then((url) => { if (url) { picture.replaceChildren(element("img", { src: url, alt: "" })); picture.classList.add("has-thumb"); } });
    return element("li", { "data-name": file.name },
      element("button", { type: "button", class: "suggestion", onclick: () => open(file), "aria-label": `${file.name}, ${line(file, latest.get(file.id))}` },
        picture,
        element("span", { class: "label" }, file.name),
        element("span", { class: "muted small" }, line(file, latest.get(file.id)))));
  });
  $("home-recent").replaceChildren(...cards);
  $("no-recent").hidden = cards.length > 0;
}

export async function showActivity(open) {
  let list;
  try { list = await api("GET", "/v1/activity?limit=200"); } catch (error) { reportError(error); return; }
  const me = session.username;
  const rows = list.events.map((event) => {
    // Said in the second person for the user's own devices.
    const summary = event.by.username === me ? event.summary.replace(new RegExp(`^${me.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\b`), "You") : event.summary;
    const target = event.file.trashed ? element("span", {}, summary)
      : element("a", { href: "#", onclick: (e) => { e.preventDefault(); open(event.file); } }, summary);
    return element("li", { "data-action": event.action, "data-name": event.file.name },
      element("span", { class: "icon", "aria-hidden": "true" }, iconFor(event.file)),
      element("span", { class: "what" }, target),
      element("time", { datetime: event.at, class: "muted", title: formatDate(event.at) }, shortDate(event.at)));
  });
  $("activity-list").replaceChildren(...rows);
  $("no-activity").hidden = rows.length > 0;
}
