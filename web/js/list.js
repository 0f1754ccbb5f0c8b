// The file list every place shows (a folder, search results, starred, recent): a window of rows over any number of
// items (only what is on screen is in the page, so 10,000 items open and scroll like 10), in a list or a grid of
// thumbnails, with multi-select (click, shift, ctrl/cmd, select all) and a roving keyboard focus.
import { FOLDER, session } from "./api.js";
import { element, formatSize, iconFor, shortDate } from "./dom.js";
import { thumbnail } from "./thumbs.js";

const ROW = 48;
const CARD = 196;
const CARD_WIDTH = 172;
const OVERSCAN = 6;

export class FileList {
  /**
   * `host`: the element the list lives in. `options.open(file)`, `options.menu(file, button)`, `options.changed()`
   * (the selection changed), `options.showPath` (search results), `options.sort`/`options.onSort(key)`.
   */
  constructor(host, options) {
    this.host = host;
    this.options = options;
    this.items = [];
    this.selected = new Set();
    this.anchor = -1;
    this.focus = 0;
    this.mode = localStorage.getItem("nimbus.view") || "list";
    this.header = element("div", { class: "list-header", role: "row" });
    this.body = element("div", { class: "list-body", role: "rowgroup" });
    this.grid = element("div", { class: `file-list mode-${this.mode}`, role: "grid", "aria-multiselectable": "true", "aria-label": options.label || "Files", "aria-rowcount": "0" },
      this.header, this.body);
    host.replaceChildren(this.grid);
    this.renderHeader();
    this.scheduled = false;
    this.onScroll = () => this.schedule();
    window.addEventListener("scroll", this.onScroll, { passive: true });
    window.addEventListener("resize", this.onScroll);
    this.body.addEventListener("keydown", (event) => this.key(event));
  }

  destroy() {
    window.removeEventListener("scroll", this.onScroll);
    window.removeEventListener("resize", this.onScroll);
  }

  setMode(mode) {
    this.mode = mode;
    localStorage.setItem("nimbus.view", mode);
    this.grid.className = `file-list mode-${mode}`;
    this.render(true);
  }

  setItems(items) {
    this.items = items;
    const ids = new Set(items.map((file) => file.id));
    for (const id of [...this.selected]) if (!ids.has(id)) this.selected.delete(id);
    this.focus = Math.min(this.focus, Math.max(items.length - 1, 0));
    this.grid.setAttribute("aria-rowcount", String(items.length + 1));
    this.render(true);
    this.options.changed?.();
  }

  append(items) { this.setItems(this.items.concat(items)); }

  /** The selected items, in list order. */
  selection() { return this.items.filter((file) => this.selected.has(file.id)); }

  selectAll() {
    for (const file of this.items) this.selected.add(file.id);
    this.render(true);
    this.options.changed?.();
  }

  clearSelection() {
    if (!this.selected.size) return false;
    this.selected.clear();
    this.render(true);
    this.options.changed?.();
    return true;
  }

  renderHeader() {
    const sort = this.options.sort;
    const column = (key, label, className) => {
      if (!sort) return element("span", { class: `cell ${className}`, role: "columnheader" }, label);
      const active = sort.key === key;
      const arrow = active ? (sort.order === "desc" ? " ↓" : " ↑") : "";
      return element("span", { class: `cell ${className}`, role: "columnheader", "aria-sort": active ? (sort.order === "desc" ? "descending" : "ascending") : "none" },
        element("button", { type: "button", class: "sort", "data-sort": key, onclick: () => this.options.onSort(key) }, label + arrow));
    };
    const all = element("input", { type: "checkbox", "aria-label": "Select all", onchange: (event) => (event.target.checked ? this.selectAll() : this.clearSelection()) });
    this.header.replaceChildren(
      element("span", { class: "cell check", role: "columnheader" }, all),
      element("span", { class: "cell icon", role: "columnheader", "aria-label": "Type" }),
      column("name", "Name", "name"),
      column("size", "Size", "size"),
      column("modified", "Modified", "date"),
      element("span", { class: "cell actions", role: "columnheader", "aria-label": "Actions" }));
    this.selectAllBox = all;
  }

  /** Lines (a row, or a line of cards) and how many items each holds. */
  geometry() {
    if (this.mode === "grid") {
      const perLine = Math.max(1, Math.floor((this.body.clientWidth || window.innerWidth) / CARD_WIDTH));
      return { perLine, height: CARD, lines: Math.ceil(this.items.length / perLine) };
    }
    return { perLine: 1, height: ROW, lines: this.items.length };
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => { this.scheduled = false; this.render(false); });
  }

  /** Puts the rows that are on screen (and a few either side) in the page. */
  render(force) {
    const { perLine, height, lines } = this.geometry();
    this.body.style.height = `${lines * height}px`;
    const top = this.body.getBoundingClientRect().top;
    const first = Math.max(0, Math.floor(-top / height) - OVERSCAN);
    const last = Math.min(lines, Math.ceil((window.innerHeight - top) / height) + OVERSCAN);
    const range = `${first}-${last}-${perLine}-${this.mode}`;
    if (!force && range === this.range) return;
    this.range = range;
    // A row whose item, place and state did not change keeps its node (and its thumbnail): a live update that
    // changed nothing on screen changes nothing in the page.
    const nodes = [];
    const kept = new Map();
    const built = this.built || new Map();
    for (let line = first; line < last; line++) {
      for (let column = 0; column < perLine; column++) {
        const index = line * perLine + column;
        if (index >= this.items.length) break;
        const file = this.items[index];
        const key = [this.mode, index, index === this.focus, this.selected.has(file.id), this.options.showPath, JSON.stringify(file)].join("|");
        const node = built.get(key) || (this.mode === "grid" ? this.card(file, index) : this.row(file, index));
        node.style.transform = `translate(${this.mode === "grid" ? column * CARD_WIDTH : 0}px, ${line * height}px)`;
        kept.set(key, node);
        nodes.push(node);
      }
    }
    this.built = kept;
    const hadFocus = this.body.contains(document.activeElement);
    if (nodes.length !== this.body.children.length || nodes.some((node, at) => this.body.children[at] !== node)) this.body.replaceChildren(...nodes);
    if (hadFocus) this.body.querySelector(`[data-index="${this.focus}"]`)?.focus();
    if (this.selectAllBox) {
      this.selectAllBox.checked = this.items.length > 0 && this.selected.size === this.items.length;
      this.selectAllBox.indeterminate = this.selected.size > 0 && this.selected.size < this.items.length;
    }
  }

  attributes(file, index, className) {
    return {
      class: className + (this.selected.has(file.id) ? " selected" : ""), role: "row", "aria-rowindex": String(index + 2),
      "aria-selected": this.selected.has(file.id) ? "true" : "false", tabindex: index === this.focus ? "0" : "-1",
      "data-id": file.id, "data-name": file.name, "data-index": String(index),
      onclick: (event) => this.click(event, file, index), ondblclick: () => this.options.open(file),
    };
  }

  row(file, index) {
    const isFolder = file.mimeType === FOLDER;
    const check = element("input", { type: "checkbox", tabindex: "-1", "aria-label": `Select ${file.name}`, onclick: (event) => { event.stopPropagation(); this.toggle(file, index); } });
    check.checked = this.selected.has(file.id);
    const icon = element("span", { class: "cell icon", role: "gridcell" }, iconFor(file));
    this.thumb(file, icon, 64);
    const name = element("span", { class: "cell name", role: "gridcell" },
      element("a", { href: isFolder ? `#/files/${encodeURIComponent(file.id)}` : "#", tabindex: "-1", onclick: (event) => { event.preventDefault(); event.stopPropagation(); this.options.open(file); } }, file.name),
      this.badges(file));
    if (this.options.showPath && file.path) name.append(element("span", { class: "path muted" }, file.path.slice(0, file.path.length - file.name.length - 1) || "/"));
    return element("div", this.attributes(file, index, "row"),
      element("span", { class: "cell check", role: "gridcell" }, check),
      icon, name,
      element("span", { class: "cell size", role: "gridcell" }, isFolder ? "—" : formatSize(file.size)),
      element("span", { class: "cell date", role: "gridcell" }, shortDate(file.modifiedAt)),
      element("span", { class: "cell actions", role: "gridcell" }, this.menuButton(file)));
  }

  card(file, index) {
    const picture = element("span", { class: "picture" }, iconFor(file, 64));
    this.thumb(file, picture, 256);
    return element("div", this.attributes(file, index, "card"),
      picture,
      element("span", { class: "card-name" }, element("span", { class: "label", title: file.name }, file.name), this.badges(file)),
      element("span", { class: "card-meta muted" }, file.mimeType === FOLDER ? "Folder" : `${formatSize(file.size)} · ${shortDate(file.modifiedAt)}`),
      element("span", { class: "card-actions" }, this.menuButton(file)));
  }

  badges(file) {
    const marks = element("span", { class: "marks" });
    if (file.starred) marks.append(element("span", { class: "star", title: "Starred", "aria-label": "Starred" }, "★"));
    const mine = !file.owner || file.owner.username === session.username;
    if (file.shared && mine) marks.append(element("span", { class: "badge shared" }, "Shared"));
    if (!mine) marks.append(element("span", { class: "badge shared", title: `Shared with you by ${file.owner.username}` }, `from ${file.owner.username}`));
    return marks;
  }

  menuButton(file) {
    return element("button", { type: "button", class: "small more", tabindex: "-1", "aria-haspopup": "menu", "aria-label": `Actions for ${file.name}`,
      onclick: (event) => { event.stopPropagation(); this.options.menu(file, event.currentTarget); } }, "⋯");
  }

  thumb(file, holder, size) {
    thumbnail(file, size).then((url) => {
      if (!url || !holder.isConnected) return;
      holder.replaceChildren(element("img", { src: url, alt: "", loading: "lazy", decoding: "async" }));
      holder.classList.add("has-thumb");
    });
  }

  toggle(file, index) {
    if (this.selected.has(file.id)) this.selected.delete(file.id); else this.selected.add(file.id);
    this.anchor = index;
    this.focus = index;
    this.render(true);
    this.options.changed?.();
  }

  click(event, file, index) {
    if (event.shiftKey && this.anchor >= 0) {
      const [from, to] = [Math.min(this.anchor, index), Math.max(this.anchor, index)];
      if (!(event.ctrlKey || event.metaKey)) this.selected.clear();
      for (let i = from; i <= to; i++) this.selected.add(this.items[i].id);
      this.focus = index;
      this.render(true);
      this.options.changed?.();
    } else if (event.ctrlKey || event.metaKey) {
      this.toggle(file, index);
    } else {
      this.selected.clear();
      this.selected.add(file.id);
      this.anchor = index;
      this.focus = index;
      this.render(true);
      this.options.changed?.();
      this.options.select?.(file);
    }
    this.body.querySelector(`[data-index="${index}"]`)?.focus();
  }

  /** Moves the keyboard focus to item `index`, scrolling it into view. */
  focusIndex(index) {
    if (!this.items.length) return;
    this.focus = Math.max(0, Math.min(index, this.items.length - 1));
    const { perLine, height } = this.geometry();
    const line = Math.floor(this.focus / perLine);
    const top = this.body.getBoundingClientRect().top + window.scrollY + line * height;
    if (top < window.scrollY + 120) window.scrollTo(0, top - 120);
    else if (top + height > window.scrollY + window.innerHeight) window.scrollTo(0, top + height - window.innerHeight + 8);
    this.render(true);
    this.body.querySelector(`[data-index="${this.focus}"]`)?.focus();
  }

  focused() { return this.items[this.focus]; }

  key(event) {
    const { perLine } = this.geometry();
    const moves = { ArrowDown: perLine, j: perLine, ArrowUp: -perLine, k: -perLine, ArrowRight: this.mode === "grid" ? 1 : 0, ArrowLeft: this.mode === "grid" ? -1 : 0 };
    if (event.key in moves && moves[event.key] && !event.altKey) {
      event.preventDefault();
      const from = this.focus;
      this.focusIndex(from + moves[event.key]);
      if (event.shiftKey) {
        this.selected.add(this.items[from].id);
        this.selected.add(this.items[this.focus].id);
        this.render(true);
        this.options.changed?.();
      }
    } else if (event.key === "Home" || event.key === "End") {
      event.preventDefault();
      this.focusIndex(event.key === "Home" ? 0 : this.items.length - 1);
    } else if (event.key === " ") {
      event.preventDefault();
      const file = this.focused();
      if (file) this.toggle(file, this.focus);
    } else if (event.key === "Enter") {
      event.preventDefault();
      const file = this.focused();
      if (file) this.options.open(file);
    }
  }
}
