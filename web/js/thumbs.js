// Thumbnails: fetched with the Authorization header (so as blobs), a few at a time, each once per revision and
// size; a 404 (no_thumbnail) is remembered too, and the icon stays.
import { fetchBlob } from "./api.js";
import { kindOf } from "./dom.js";

const cache = new Map();
const queue = [];
let running = 0;
const MOST = 4;

/** Whether the server may have a thumbnail of this item (images but SVG, PDFs, videos). */
export function mayHaveThumbnail(file) { return ["image", "pdf", "video"].includes(kindOf(file)) && Boolean(file.revisionId); }

/** An object URL of the item's thumbnail at `size`, or null. */
export function thumbnail(file, size) {
  if (!mayHaveThumbnail(file)) return Promise.resolve(null);
  const key = `${file.id}:${file.revisionId}:${size}`;
  if (!cache.has(key)) {
    cache.set(key, new Promise((resolve) => {
      queue.push(async () => {
        try { resolve(URL.createObjectURL(await fetchBlob(`/v1/files/${encodeURIComponent(file.id)}/thumbnail?size=${size}`))); } catch { resolve(null); }
      });
      pump();
    }));
  }
  return cache.get(key);
}

function pump() {
  while (running < MOST && queue.length) {
    const job = queue.shift();
    running++;
    job().finally(() => { running--; pump(); });
  }
}
