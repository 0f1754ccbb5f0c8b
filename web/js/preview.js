// The preview pane: an image, a PDF in the browser's own viewer, text and Markdown as text (never rendered: HTML
// and SVG are shown as their source), audio and video players with seeking; details and actions beside them.
// Content is fetched with the Authorization header into a blob of a type chosen here, never the server's.
import { api, fetchBlob, FOLDER } from "./api.js";
import { $, element, formatDate, formatSize, iconFor, kindOf, reportError } from "./dom.js";
import { thumbnail } from "./thumbs.js";

const LARGEST_TEXT = 1 << 20;
const LARGEST_MEDIA = 1 << 30;
const LARGEST_IMAGE = 40 << 20;
let current = null;
let urls = [];

/** Actions the pane offers (set by main.js). */
export const previewActions = { download: () => {}, share: () => {}, star: () => {}, revisions: () => {} };

export function previewing() { return current; }

export function closePreview() {
  const pane = $("preview");
  if (pane.hidden) return false;
  pane.hidden = true;
  document.body.classList.remove("previewing");
  $("preview-body").replaceChildren();
  for (const url of urls) URL.revokeObjectURL(url);
  urls = [];
  const returnTo = current && document.querySelector(`.file-list [data-id="${CSS.escape(current.id)}"]`);
  current = null;
  returnTo?.focus();
  return true;
}

function blobURL(blob) {
  const url = URL.createObjectURL(blob);
  urls.push(url);
  return url;
}

export async function openPreview(file) {
  closePreview();
  current = file;
  const pane = $("preview");
  pane.hidden = false;
  document.body.classList.add("previewing");
  $("preview-title").textContent = file.name;
  const body = $("preview-body");
  const stage = element("div", { class: "stage" }, element("span", { class: "muted" }, "Loading…"));
  const can = file.capabilities || {};
  const actions = element("div", { class: "preview-actions" });
  if (file.mimeType !== FOLDER) actions.append(element("button", { type: "button", class: "primary", onclick: () => previewActions.download(file) }, "Download"));
  if (can.canShare) actions.append(element("button", { type: "button", onclick: () => previewActions.share(file) }, "Share"));
  actions.append(element("button", { type: "button", "aria-pressed": file.starred ? "true" : "false", onclick: () => previewActions.star(file) }, file.starred ? "Unstar" : "Star"));
  if (file.mimeType !== FOLDER) actions.append(element("button", { type: "button", onclick: () => previewActions.revisions(file) }, "Revisions"));
  const details = element("dl", { class: "details" },
    element("dt", {}, "Type"), element("dd", {}, file.mimeType),
    element("dt", {}, "Size"), element("dd", {}, file.mimeType === FOLDER ? "—" : formatSize(file.size)),
    element("dt", {}, "Modified"), element("dd", {}, formatDate(file.modifiedAt)),
    element("dt", {}, "Owner"), element("dd", {}, file.owner ? file.owner.username : "you"));
  if (file.path) details.append(element("dt", {}, "Where"), element("dd", {}, file.path));
  body.replaceChildren(stage, actions, details);
  $("preview-close").focus();
  try {
    stage.replaceChildren(await content(file));
  } catch (error) {
    if (current === file) stage.replaceChildren(fallback(file, "No preview of this file."));
    reportError(error);
  }
}

function fallback(file, message) {
  return element("div", { class: "no-preview" }, iconFor(file, 96), element("p", { class: "muted" }, message));
}

/** What the stage shows for `file`. */
async function content(file) {
  const kind = kindOf(file);
  const path = `/v1/files/${encodeURIComponent(file.id)}/content`;
  const type = (file.mimeType || "").toLowerCase();
  if (kind === "image") {
    if (file.size <= LARGEST_IMAGE) return element("img", { src: blobURL(await fetchBlob(path, { type })), alt: file.name, class: "preview-image" });
    const url = await thumbnail(file, 1024);
    return url ? element("img", { src: url, alt: file.name, class: "preview-image" }) : fallback(file, "Too large to preview; download it.");
  }
  if (kind === "pdf") {
    return element("iframe", { src: blobURL(await fetchBlob(path, { type: "application/pdf" })), title: `PDF: ${file.name}`, class: "preview-pdf" });
  }
  if (kind === "video" || kind === "audio") {
    if (file.size > LARGEST_MEDIA) return fallback(file, "Too large to play here; download it.");
    const player = element(kind, { controls: true, preload: "metadata", src: blobURL(await fetchBlob(path, { type })), class: `preview-${kind}` });
    player.setAttribute("aria-label", `${kind === "video" ? "Video" : "Audio"}: ${file.name}`);
    return player;
  }
  if (kind === "text" || kind === "drawing" || type === "text/html") {
    if (file.size > LARGEST_TEXT) return fallback(file, "Too long to show here; download it.");
    const blob = await fetchBlob(path, { type: "text/plain" });
    return element("pre", { class: "preview-text", tabindex: "0", "aria-label": `Text of ${file.name}` }, await blob.text());
  }
  if (file.mimeType === FOLDER) {
    const list = await api("GET", `/v1/files?parentId=${encodeURIComponent(file.id)}&limit=1`);
    return fallback(file, `A folder with ${list.pagination.totalItems} item${list.pagination.totalItems === 1 ? "" : "s"}.`);
  }
  return fallback(file, "No preview of this type; download it.");
}
