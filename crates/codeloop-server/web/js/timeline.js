// The conversation as a windowed list: only the rows in and near the viewport are in the document (a
// 10 000-part session keeps a few dozen nodes), the rest are spacers of their measured or estimated
// height. Rendering happens in one animation frame after something changed (a scroll, new rows, a
// streamed delta), never on a timer: an idle page does no work.
//
// Scrolling stays put: at the bottom, the view follows new content; elsewhere the first row in view
// keeps its place when rows above it are added (older pages) or change height.

/** Pixels of rows rendered beyond each edge of the viewport. */
const OVERSCAN = 800;
/** The same for the first rows drawn after a (re)load: the screen first, the margins a frame later. */
const FIRST_OVERSCAN = 50;
/** Rendered rows kept (detached) for reuse after they scroll out. */
const KEEP = 400;
/** Within this many pixels of the bottom counts as "at the bottom". */
const STICKY = 24;

export class Timeline {
  /**
   * `render(row)` builds a row's node; `onNearTop()` is called when the first rows come into range
   * (to load older messages); `onPaint()` after every frame that changed the document.
   */
  constructor(scroller, {rows, version, render, onNearTop, onPaint}) {
    this.scroller = scroller;
    this.version = version;
    this.source = rows;
    this.rowsDirty = false;
    this.render = render;
    this.onNearTop = onNearTop;
    this.onPaint = onPaint;
    this.top = document.createElement('div');
    this.list = document.createElement('div');
    this.bottom = document.createElement('div');
    this.top.className = 'spacer';
    this.bottom.className = 'spacer';
    this.list.className = 'rows';
    scroller.append(this.top, this.list, this.bottom);
    this.rows = [];
    this.index = new Map();
    this.heights = new Map();
    this.nodes = new Map();
    this.offsets = new Float64Array(1);
    this.offsetsValid = false;
    this.frame = 0;
    this.stuck = true;
    this.anchor = null;
    this.lastScrollTop = 0;
    this.paints = 0;
    /** Whether rows were drawn since the last reset (then the margins are drawn too). */
    this.drawn = false;
    this.resize = new ResizeObserver((entries) => this.resized(entries));
    // The view itself shrinks when a permission prompt or a panel opens below it: a view that follows the
    // newest row keeps it in sight.
    this.resize.observe(scroller);
    scroller.addEventListener('scroll', () => this.scrolled(), {passive: true});
  }

  /** The rows changed shape: they are taken again from the source before the next frame. */
  invalidateRows() {
    this.rowsDirty = true;
    this.schedule();
  }

  /** Replaces the rows (same keys keep their nodes and heights). */
  setRows(rows) {
    this.rememberAnchor();
    this.rows = rows;
    this.index = new Map(rows.map((row, i) => [row.key, i]));
    this.offsetsValid = false;
    this.schedule();
  }

  /** Forgets one row's node, so it is built again (a fold opened or closed). */
  invalidate(key) {
    const cached = this.nodes.get(key);
    if (cached) cached.v = NaN;
    this.schedule();
  }

  /** Something in the rows changed (a delta): re-render what is in view. */
  refresh() {
    this.schedule();
  }

  /** Keeps row `key` where it is on screen while it changes (a person opened or closed part of it). */
  keep(key) {
    const i = this.index.get(key);
    if (i === undefined) return;
    this.layout();
    this.stuck = false;
    this.anchor = {key, delta: this.scroller.scrollTop - this.offsets[i]};
    this.schedule();
  }

  /** Jumps to the newest row and follows new content. */
  toBottom() {
    this.stuck = true;
    this.schedule();
  }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => this.paint());
  }

  scrolled() {
    const el = this.scroller;
    if (Math.abs(el.scrollTop - this.lastScrollTop) < 1) return;
    this.lastScrollTop = el.scrollTop;
    this.stuck = el.scrollHeight - el.scrollTop - el.clientHeight <= STICKY;
    this.anchor = null;
    this.schedule();
  }

  resized(entries) {
    let changed = false;
    for (const entry of entries) {
      if (entry.target === this.scroller) {
        changed ||= this.stuck;
        continue;
      }
      const key = entry.target.dataset.key;
      const height = entry.target.offsetHeight;
      if (key && height && this.heights.get(key) !== height) {
        if (!this.anchor) this.rememberAnchor();
        this.heights.set(key, height);
        changed = true;
      }
    }
    if (changed) {
      this.offsetsValid = false;
      this.schedule();
    }
  }

  height(row) {
    return this.heights.get(row.key) ?? estimate(row);
  }

  layout() {
    if (this.offsetsValid) return;
    const n = this.rows.length;
    if (this.offsets.length < n + 1) this.offsets = new Float64Array(Math.max(n + 1, this.offsets.length * 2));
    this.offsets[0] = 0;
    for (let i = 0; i < n; i += 1) this.offsets[i + 1] = this.offsets[i] + this.height(this.rows[i]);
    this.offsetsValid = true;
  }

  /** The first row at or below `y`. */
  rowAt(y) {
    let lo = 0;
    let hi = this.rows.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.offsets[mid + 1] <= y) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Remembers the first row in view and how far it is from the top, to keep it there. */
  rememberAnchor() {
    if (this.stuck || !this.rows.length || this.anchor) return;
    this.layout();
    const y = this.scroller.scrollTop;
    const i = Math.min(this.rowAt(y), this.rows.length - 1);
    this.anchor = {key: this.rows[i].key, delta: y - this.offsets[i]};
  }

  paint() {
    this.frame = 0;
    if (this.rowsDirty) {
      this.rowsDirty = false;
      this.setRows(this.source());
      // setRows asked for a frame: this is it.
      cancelAnimationFrame(this.frame);
      this.frame = 0;
    }
    const el = this.scroller;
    this.layout();
    const total = this.offsets[this.rows.length];
    const view = el.clientHeight;
    let scrollTop = el.scrollTop;
    if (this.stuck) {
      scrollTop = Math.max(0, total - view);
    } else if (this.anchor && this.index.has(this.anchor.key)) {
      scrollTop = this.offsets[this.index.get(this.anchor.key)] + this.anchor.delta;
    }
    const [start, end] = this.range(scrollTop, view);
    this.place(start, end);
    // Rows just rendered have real heights now: measure, then place again if the estimates were off.
    if (this.measure(start, end)) {
      this.offsetsValid = false;
      this.layout();
      const again = this.stuck
        ? Math.max(0, this.offsets[this.rows.length] - view)
        : this.anchor && this.index.has(this.anchor.key)
          ? this.offsets[this.index.get(this.anchor.key)] + this.anchor.delta
          : scrollTop;
      const [s2, e2] = this.range(again, view);
      this.place(s2, e2);
      this.measure(s2, e2);
      this.offsetsValid = false;
      this.layout();
      scrollTop = again;
    }
    this.top.style.height = `${this.offsets[this.visibleStart]}px`;
    this.bottom.style.height = `${this.offsets[this.rows.length] - this.offsets[this.visibleEnd]}px`;
    if (this.stuck) el.scrollTop = el.scrollHeight;
    else if (Math.abs(el.scrollTop - scrollTop) >= 1) el.scrollTop = scrollTop;
    this.lastScrollTop = el.scrollTop;
    this.anchor = null;
    this.paints += 1;
    if (!this.drawn && this.rows.length > 1) {
      // The margins follow in the next frame.
      this.drawn = true;
      this.schedule();
    }
    if (this.visibleStart <= 2 && this.onNearTop) this.onNearTop();
    if (this.onPaint) this.onPaint();
  }

  range(scrollTop, view) {
    if (!this.rows.length) return [0, 0];
    const overscan = this.drawn ? OVERSCAN : FIRST_OVERSCAN;
    const start = this.rowAt(Math.max(0, scrollTop - overscan));
    let end = this.rowAt(scrollTop + view + overscan) + 1;
    end = Math.min(end, this.rows.length);
    return [start, end];
  }

  /** Puts rows `start..end` in the list, in order, building or updating nodes as needed. */
  place(start, end) {
    const wanted = [];
    for (let i = start; i < end; i += 1) wanted.push(this.node(this.rows[i]));
    const list = this.list;
    let cursor = list.firstChild;
    for (const node of wanted) {
      if (node === cursor) {
        cursor = cursor.nextSibling;
      } else {
        list.insertBefore(node, cursor);
      }
    }
    while (cursor) {
      const next = cursor.nextSibling;
      this.resize.unobserve(cursor);
      list.removeChild(cursor);
      cursor = next;
    }
    for (const node of wanted) this.resize.observe(node);
    this.visibleStart = start;
    this.visibleEnd = end;
    if (this.nodes.size > KEEP) this.prune(start, end);
  }

  node(row) {
    const v = this.version(row);
    const cached = this.nodes.get(row.key);
    if (cached && cached.v === v && cached.row.kind === row.kind) return cached.node;
    const node = this.render(row);
    node.dataset.key = row.key;
    node.classList.add('row');
    if (cached?.node.parentNode) cached.node.replaceWith(node);
    this.nodes.set(row.key, {v, row, node});
    return node;
  }

  /** Measured heights of rows `start..end`; true when any differs from what layout assumed. */
  measure(start, end) {
    let changed = false;
    for (let i = start; i < end; i += 1) {
      const key = this.rows[i].key;
      const node = this.nodes.get(key)?.node;
      if (!node) continue;
      const height = node.offsetHeight;
      if (this.heights.get(key) !== height) {
        this.heights.set(key, height);
        changed = true;
      }
    }
    return changed;
  }

  prune(start, end) {
    for (const [key, cached] of this.nodes) {
      if (this.nodes.size <= KEEP / 2) break;
      const i = this.index.get(key);
      if (i === undefined || i < start - 50 || i >= end + 50) {
        if (!cached.node.parentNode) this.nodes.delete(key);
      }
    }
  }

  /** Starts over for another conversation. */
  reset() {
    for (const child of [...this.list.childNodes]) this.resize.unobserve(child);
    this.list.replaceChildren();
    this.nodes.clear();
    this.heights.clear();
    this.rows = [];
    this.index = new Map();
    this.offsetsValid = false;
    this.stuck = true;
    this.anchor = null;
    this.drawn = false;
    this.invalidateRows();
  }

  /** How many rows are in the document now. */
  rendered() {
    return this.list.childElementCount;
  }
}

/** A first guess of a row's height before it is measured. */
function estimate(row) {
  switch (row.kind) {
    case 'part': {
      const part = row.entry.parts.get(row.id);
      if (!part) return 0;
      if (part.type === 'text') return 30 + 22 * Math.ceil((part.text?.length ?? 0) / 90);
      if (part.type === 'tool') return 96;
      return 34;
    }
    case 'user':
      return 64;
    case 'footer':
      return 26;
    default:
      return 34;
  }
}
