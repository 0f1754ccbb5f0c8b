// Small DOM helpers shared by every view: building elements, icons, formatting, alerts, the prompt dialog.
import { APIError, FOLDER } from "./api.js";

export const $ = (id) => document.getElementById(id);

export function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === "") continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function showAlert(message, kind = "error") {
  const alert = $("alert");
  alert.textContent = message;
  alert.className = kind === "info" ? "alert info" : "alert";
  alert.hidden = false;
  clearTimeout(showAlert.timer);
  showAlert.timer = setTimeout(() => { alert.hidden = true; }, 8000);
}

/** Says something to screen readers (the polite live region). */
export function announce(message) {
  const live = $("live");
  live.textContent = "";
  setTimeout(() => { live.textContent = message; }, 30);
}

export function reportError(error) {
  if (error && error.name === "AbortError") return;
  showAlert(error instanceof APIError ? error.message : `Something went wrong: ${error && error.message || error}`);
}

export function formatSize(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function formatDate(text) {
  const date = new Date(text);
  return isNaN(date) ? "" : date.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

/** "Apr 25" this year, "Apr 25, 2025" before, "14:05" today. */
export function shortDate(text) {
  const date = new Date(text);
  if (isNaN(date)) return "";
  const now = new Date();
  if (date.toDateString() === now.toDateString()) return date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
  const options = { month: "short", day: "numeric" };
  if (date.getFullYear() !== now.getFullYear()) options.year = "numeric";
  return date.toLocaleDateString(undefined, options);
}

/** The kind of an item by its type, for icons and previews. */
export function kindOf(file) {
  const type = (file.mimeType || "").toLowerCase();
  if (type === FOLDER) return "folder";
  if (type === "image/svg+xml") return "drawing";
  if (type.startsWith("image/")) return "image";
  if (type.startsWith("video/")) return "video";
  if (type.startsWith("audio/")) return "audio";
  if (type === "application/pdf") return "pdf";
  if (/zip|tar|gzip|7z|rar|bzip|xz|zstd/.test(type)) return "archive";
  if (/sheet|excel|csv/.test(type)) return "sheet";
  if (/presentation|powerpoint/.test(type)) return "slides";
  if (type.startsWith("text/") || /json|xml|yaml|javascript|markdown/.test(type)) return "text";
  return "file";
}

const colors = { folder: "#54aeff", image: "#8250df", drawing: "#8250df", video: "#cf222e", audio: "#bf3989", pdf: "#cf222e", archive: "#9a6700", sheet: "#1a7f37", slides: "#bc4c00", text: "#57606a", file: "#6e7781" };
const labels = { image: "IMG", drawing: "SVG", video: "VID", audio: "AUD", pdf: "PDF", archive: "ZIP", sheet: "XLS", slides: "PPT", text: "TXT", file: "" };

/** A small SVG icon by kind (no emoji: fonts differ; no image files: nothing to fetch). */
export function iconFor(file, size = 22) {
  const kind = kindOf(file);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", String(size));
  svg.setAttribute("height", String(size));
  svg.setAttribute("class", `ico ico-${kind}`);
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS(ns, "path");
  path.setAttribute("fill", colors[kind]);
  path.setAttribute("d", kind === "folder"
    ? "M2 5.5A1.5 1.5 0 0 1 3.5 4h5l2 2h10A1.5 1.5 0 0 1 22 7.5v11a1.5 1.5 0 0 1-1.5 1.5h-17A1.5 1.5 0 0 1 2 18.5z"
    : "M6 2h8l5 5v13.5A1.5 1.5 0 0 1 17.5 22h-11A1.5 1.5 0 0 1 5 20.5v-17A1.5 1.5 0 0 1 6.5 2zM13.5 3v4.5H18");
  svg.append(path);
  if (kind !== "folder" && labels[kind]) {
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", "12");
    label.setAttribute("y", "18");
    label.setAttribute("text-anchor", "middle");
    label.setAttribute("font-size", "6");
    label.setAttribute("font-family", "sans-serif");
    label.setAttribute("fill", "#fff");
    label.textContent = labels[kind];
    svg.append(label);
  }
  return svg;
}

/** Asks for a line of text in a dialog; resolves to the text, or null when cancelled. */
export function ask(title, label, value = "") {
  return new Promise((resolve) => {
    const dialog = $("prompt-dialog");
    $("prompt-title").textContent = title;
    $("prompt-label").textContent = label;
    const input = $("prompt-input");
    input.value = value;
    dialog.onclose = () => resolve(dialog.returnValue === "ok" && input.value.trim() ? input.value.trim() : null);
    dialog.returnValue = "";
    dialog.showModal();
    input.focus();
    // The name without its extension selected, as file managers do.
    const dot = value.lastIndexOf(".");
    input.setSelectionRange(0, dot > 0 ? dot : value.length);
  });
}

/** Whether keys typed now go into a text field (shortcuts stay out of its way). */
export function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}
