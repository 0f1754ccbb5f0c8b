"use strict";
// The page of a public link (/s/TOKEN): a password prompt when the link has one, then the folder's items (browse,
// download), one file's download, or a drop zone (upload links). It speaks only to /v1/public/TOKEN/…; the session a
// password gives is kept for this tab only.
(() => {
  const token = decodeURIComponent(location.pathname.split("/")[2] || "");
  const base = "/v1/public/" + encodeURIComponent(token);
  const $ = (id) => document.getElementById(id);
  const sessionKey = "nimbus-link-session:" + token;
  let info = null;

  function alertText(text) { const el = $("alert"); el.textContent = text; el.hidden = !text; }
  function show(view) { for (const id of ["password-view", "browse-view", "file-view", "drop-view"]) $(id).hidden = id !== view; }
  function headers() { const s = sessionStorage.getItem(sessionKey); return s ? { Authorization: "Bearer " + s } : {}; }
  function size(n) { const u = ["B", "KB", "MB", "GB", "TB"]; let i = 0; while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; } return (i ? n.toFixed(1) : n) + " " + u[i]; }

  async function api(path, options = {}) {
    const response = await fetch(base + path, { ...options, headers: { ...headers(), ...(options.headers || {}) } });
    if (!response.ok) {
      let message = "HTTP " + response.status;
      try { const body = await response.json(); message = body.error.message; if (body.error.code === "password_required") { sessionStorage.removeItem(sessionKey); } } catch (e) {}
      const error = new Error(message); error.status = response.status; throw error;
    }
    return response;
  }

  async function start() {
    try {
      info = await (await api("")).json();
    } catch (error) {
      alertText(error.status === 410 ? "This link no longer works: " + error.message : error.status === 404 ? "There is no such link." : error.message);
      return;
    }
    $("link-kind").textContent = { view: "View only", edit: "View and add", upload: "Send files" }[info.access] || "";
    document.title = info.name + " — Nimbus";
    if (info.passwordRequired && !sessionStorage.getItem(sessionKey)) { show("password-view"); $("link-password").focus(); return; }
    open();
  }

  function open() {
    if (info.access === "upload") { $("drop-title").textContent = "Send files to " + info.name; show("drop-view"); return; }
    if (!info.isFolder) {
      $("file-name").textContent = info.name;
      $("file-size").textContent = size(info.size);
      show("file-view");
      return;
    }
    if (info.access === "edit") { $("drop-title").textContent = "Add files to " + info.name; $("drop-view").hidden = false; }
    browse([{ id: info.itemId, name: info.name }]);
  }

  async function browse(trail) {
    const folder = trail[trail.length - 1];
    let list;
    try { list = await (await api("/items?limit=1000&parentId=" + encodeURIComponent(folder.id))).json(); }
    catch (error) { alertText(error.message); if (error.status === 401) show("password-view"); return; }
    alertText("");
    const crumbs = $("crumbs"); crumbs.textContent = "";
    trail.forEach((step, index) => {
      if (index) { const sep = document.createElement("span"); sep.className = "sep"; sep.textContent = "/"; crumbs.append(sep); }
      const a = document.createElement("a"); a.href = "#"; a.textContent = step.name;
      a.addEventListener("click", (event) => { event.preventDefault(); browse(trail.slice(0, index + 1)); });
      crumbs.append(a);
    });
    const rows = $("item-rows"); rows.textContent = "";
    for (const file of list.files) {
      const tr = document.createElement("tr"); tr.dataset.name = file.name;
      const name = document.createElement("td");
      if (file.mimeType === "application/vnd.nimbus.folder") {
        const a = document.createElement("a"); a.href = "#"; a.textContent = file.name + "/";
        a.addEventListener("click", (event) => { event.preventDefault(); browse([...trail, { id: file.id, name: file.name }]); });
        name.append(a);
      } else { name.textContent = file.name; }
      const sizeCell = document.createElement("td"); sizeCell.textContent = file.mimeType === "application/vnd.nimbus.folder" ? "" : size(file.size);
      const modified = document.createElement("td"); modified.textContent = new Date(file.modifiedAt).toLocaleString();
      const action = document.createElement("td");
      if (file.mimeType !== "application/vnd.nimbus.folder") {
        const button = document.createElement("button"); button.type = "button"; button.className = "small"; button.textContent = "Download";
        button.addEventListener("click", () => download(file.id, file.name));
        action.append(button);
      }
      tr.append(name, sizeCell, modified, action);
      rows.append(tr);
    }
    $("empty").hidden = list.files.length > 0;
    show("browse-view");
    if (info.access === "edit") $("drop-view").hidden = false;
  }

  async function download(itemId, name) {
    try {
      const blob = await (await api("/items/" + encodeURIComponent(itemId) + "/content")).blob();
      const a = document.createElement("a"); a.href = URL.createObjectURL(blob); a.download = name;
      document.body.append(a); a.click(); a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 60000);
    } catch (error) { alertText(error.message); }
  }

  function send(files) {
    for (const file of files) {
      const li = document.createElement("li"); li.textContent = file.name + ": sending…"; li.dataset.name = file.name;
      $("drop-list").append(li);
      const xhr = new XMLHttpRequest();
      xhr.open("POST", base + "/upload?name=" + encodeURIComponent(file.name));
      for (const [key, value] of Object.entries(headers())) xhr.setRequestHeader(key, value);
      xhr.upload.onprogress = (event) => { if (event.lengthComputable) li.textContent = file.name + ": " + Math.round(100 * event.loaded / event.total) + "%"; };
      xhr.onload = () => { li.textContent = file.name + (xhr.status === 201 ? ": sent" : ": not sent (" + xhr.status + ")"); li.className = xhr.status === 201 ? "sent" : "failed"; };
      xhr.onerror = () => { li.textContent = file.name + ": not sent (no connection)"; li.className = "failed"; };
      xhr.send(file);
    }
  }

  $("password-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const response = await api("/session", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ password: $("link-password").value }) });
      sessionStorage.setItem(sessionKey, (await response.json()).session);
      alertText(""); open();
    } catch (error) { alertText(error.status === 429 ? error.message : "The password is not right."); }
  });
  $("file-download").addEventListener("click", () => download(info.itemId, info.name));
  $("drop-input").addEventListener("change", (event) => send(event.target.files));
  const zone = $("drop-zone");
  zone.addEventListener("dragover", (event) => { event.preventDefault(); });
  zone.addEventListener("drop", (event) => { event.preventDefault(); send(event.dataTransfer.files); });
  start();
})();
