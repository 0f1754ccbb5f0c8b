// Uploads with the resumable protocol: files, whole folders (picked or dropped: their folders are made first), a
// photo from the phone's camera. A picked file's session survives a reload (its requestId is kept per file), so
// picking it again resumes where the chunks stopped.
import { api, APIError, FOLDER } from "./api.js";
import { $, announce, element, formatSize } from "./dom.js";

const queue = [];
let running = false;
/** Called after each finished upload with the folder it went into (main.js refreshes what is shown). */
export const uploadHooks = { finished: () => {}, names: () => new Set() };

/** A stable key per picked file, so picking the same file again after a reload resumes its session. */
function fingerprint(file, parentId) { return `nimbus.upload:${parentId}:${file.name}:${file.size}:${file.lastModified}`; }

/** The folder `names` (a path under `parentId`), made where missing; ids kept in `made` for the batch. */
async function folderFor(parentId, names, made) {
  let current = parentId;
  for (let depth = 0; depth < names.length; depth++) {
    const key = `${parentId}/${names.slice(0, depth + 1).join("/")}`;
    if (!made.has(key)) {
      made.set(key, (async () => {
        try {
          return (await api("POST", "/v1/files", { json: { name: names[depth], mimeType: FOLDER, parentId: current } })).id;
        } catch (error) {
          // There already: upload into it (a file of that name is a clash the user sees).
          if (error instanceof APIError && error.code === "name_conflict" && error.body.error.existingId) {
            const existing = await api("GET", `/v1/files/${error.body.error.existingId}`);
            if (existing.mimeType === FOLDER) return existing.id;
          }
          throw error;
        }
      })());
    }
    current = await made.get(key);
  }
  return current;
}

/**
 * Queues files for `parentId`. Each entry is a File, or `{ file, path }` with the folders (names) it goes in
 * beneath `parentId` (a dropped or picked folder).
 */
export async function enqueue(entries, parentId) {
  const existing = uploadHooks.names();
  const made = new Map();
  for (const entry of entries) {
    const file = entry instanceof File ? entry : entry.file;
    const path = entry instanceof File ? [] : entry.path;
    let onConflict = "fail";
    if (!path.length && existing.has(file.name)) {
      onConflict = await askClash(file.name);
      if (!onConflict) continue;
    }
    const job = { file, path, parentId, made, onConflict, controller: new AbortController(), uploadId: null, cancelled: false };
    const label = [...path, file.name].join("/");
    job.progress = element("progress", { max: 1, value: 0, "aria-label": `Progress of ${label}` });
    job.status = element("span", { class: "muted" }, "Waiting…");
    job.cancel = element("button", { type: "button", class: "small", onclick: () => cancel(job), "aria-label": `Cancel ${label}` }, "Cancel");
    job.item = element("li", { "data-name": file.name }, element("div", { class: "row" }, element("span", { class: "name" }, label), job.cancel), job.progress, job.status);
    $("upload-list").append(job.item);
    queue.push(job);
  }
  if (!$("upload-dialog").open) $("upload-dialog").show();
  run();
}

export function askClash(name) {
  return new Promise((resolve) => {
    const dialog = $("clash-dialog");
    $("clash-text").textContent = `“${name}” already exists in this location. Replacing it keeps the old content as a revision.`;
    dialog.onclose = () => {
      if (dialog.returnValue !== "upload") return resolve(null);
      resolve(dialog.querySelector("input[name=clash]:checked").value);
    };
    dialog.returnValue = "";
    dialog.showModal();
  });
}

async function run() {
  if (running) return;
  running = true;
  try {
    while (queue.length) {
      const job = queue.shift();
      if (!job.cancelled) await upload(job).catch((error) => {
        if (job.cancelled) return;
        job.status.textContent = error instanceof APIError ? error.message : `Failed: ${error.message}`;
        job.cancel.hidden = true;
      });
    }
  } finally { running = false; }
}

async function upload(job) {
  const { file } = job;
  const parentId = job.path.length ? await folderFor(job.parentId, job.path, job.made) : job.parentId;
  const key = fingerprint(file, parentId);
  let requestId = localStorage.getItem(key);
  if (!requestId) { requestId = crypto.randomUUID(); localStorage.setItem(key, requestId); }
  job.status.textContent = "Starting…";
  const begin = () => api("POST", `/v1/upload?uploadType=resumable&onConflict=${job.onConflict}`, {
    json: { requestId, name: file.name, mimeType: file.type || "application/octet-stream", parentId, size: file.size },
    signal: job.controller.signal,
  });
  let session;
  try {
    session = await begin();
  } catch (error) {
    // The name appeared after the list was read (another device, another tab): ask now, as for a listed clash.
    if (!(error instanceof APIError) || error.code !== "name_conflict" || job.onConflict !== "fail") throw error;
    const choice = await askClash(file.name);
    if (!choice) { job.cancelled = true; job.cancel.hidden = true; job.status.textContent = "Skipped"; localStorage.removeItem(key); return; }
    job.onConflict = choice;
    session = await begin();
  }
  job.uploadId = session.uploadId;
  const resumed = session.chunksProcessed > 0 && !session.file ? ` · resumed from chunk ${session.chunksProcessed + 1}` : "";
  if (resumed) job.status.textContent = `Resuming from chunk ${session.chunksProcessed + 1} of ${session.totalChunks}`;
  while (!session.file) {
    const k = session.chunksProcessed;
    const start = k * session.chunkSize;
    const end = Math.min(start + session.chunkSize, file.size);
    const response = await api("PUT", session.uploadUrl, {
      body: file.slice(start, end), headers: { "Content-Range": `bytes ${start}-${end - 1}/${file.size}` }, raw: true, signal: job.controller.signal,
    });
    const data = await response.json().catch(() => null);
    if (response.status !== 308 && response.status !== 201) throw new APIError(response.status, data);
    session = data;
    job.progress.value = session.totalChunks ? session.chunksProcessed / session.totalChunks : 1;
    const sent = Math.min(session.chunksProcessed * session.chunkSize, file.size);
    job.status.textContent = `${session.chunksProcessed} of ${session.totalChunks} chunks · ${formatSize(sent)} of ${formatSize(file.size)}${resumed}`;
  }
  localStorage.removeItem(key);
  job.progress.value = 1;
  job.status.textContent = `Done · ${formatSize(file.size)}${resumed}`;
  job.cancel.hidden = true;
  announce(`Uploaded ${file.name}`);
  await uploadHooks.finished(job.parentId);
}

async function cancel(job) {
  job.cancelled = true;
  job.controller.abort();
  job.cancel.hidden = true;
  job.status.textContent = "Cancelled";
  localStorage.removeItem(fingerprint(job.file, job.parentId));
  if (job.uploadId) await api("DELETE", `/v1/upload/${job.uploadId}`).catch(() => {});
}

/** What a drop holds: files, and the files inside dropped folders with their paths. */
export async function dropped(dataTransfer) {
  const items = [...(dataTransfer.items || [])].filter((item) => item.kind === "file");
  const entries = items.map((item) => item.webkitGetAsEntry && item.webkitGetAsEntry()).filter(Boolean);
  if (!entries.length) return [...(dataTransfer.files || [])];
  const found = [];
  const walk = async (entry, path) => {
    if (entry.isFile) {
      const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
      found.push(path.length ? { file, path } : file);
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
        if (!batch.length) break;
        for (const child of batch) await walk(child, [...path, entry.name]);
      }
    }
  };
  for (const entry of entries) await walk(entry, []);
  return found;
}

/** A picked folder's files (`webkitdirectory`) with their paths. */
export function pickedFolder(files) {
  return [...files].map((file) => {
    const parts = (file.webkitRelativePath || file.name).split("/");
    return { file, path: parts.slice(0, -1) };
  });
}
