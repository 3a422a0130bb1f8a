// One session as the page holds it: its messages and parts (loaded page by page, newest first, and kept
// current by bus events), the page's own lines (notices, job, limit and hook lines), and the rows the
// timeline shows.
//
// Streamed text stays exact across loads: a stored snapshot lags the live stream by up to a flush
// interval, so a text part that is still streaming is rebuilt from events when it can be — the last
// `message.part.updated` for it (or the text saved with a Last-Event-ID before a reload) plus every delta
// after it, in order. Only a part streaming since before anything the page saw falls back to the
// snapshot, joined with the deltas it does not already end with.

let versions = 0;
const bump = () => (versions += 1);

/** Whether a part's text still grows by deltas. */
export function isStreaming(part) {
  return (part.type === 'text' || part.type === 'reasoning') && !part.time?.end;
}

export class Convo {
  constructor(id) {
    this.id = id;
    this.session = null;
    /** id → {info, parts: Map(id → part), order: [part ids], v} */
    this.messages = new Map();
    /** In display order: {type: 'm', id} or {type: 'n', key, level, text, v}. */
    this.items = [];
    this.hasOlder = true;
    this.loaded = false;
    /** Parts whose text follows the event order (their deltas simply append). */
    this.anchored = new Set();
    /** Events that arrived while the first page loads, applied over it when it arrives. */
    this.buffer = [];
    /** Part id → deltas seen for a part known only from a snapshot (see `settle`). */
    this.pending = new Map();
    this.structure = bump();
    this.jobs = new Map();
  }

  oldestId() {
    const first = this.items.find((item) => item.type === 'm');
    return first ? first.id : null;
  }

  entry(id) {
    let entry = this.messages.get(id);
    if (!entry) {
      entry = {info: null, parts: new Map(), order: [], v: bump()};
      this.messages.set(id, entry);
      this.insertItem(id);
      this.structure = bump();
    }
    return entry;
  }

  insertItem(id) {
    // A new message is almost always the newest: it goes at the end, after the lines that came before
    // it; one older than messages already held goes before them.
    let k = this.items.length;
    while (k > 0) {
      const item = this.items[k - 1];
      if (item.type !== 'm' || item.id < id) break;
      if (item.id === id) return;
      k -= 1;
    }
    this.items.splice(k, 0, {type: 'm', id});
  }

  /**
   * A page of `GET /session/{id}/message` (newest first), older than everything held — but for
   * messages an event already named (a part of an old message changed, e.g. by a prune): those held
   * only by that event take the page's record and move to their place among the page's messages.
   */
  addOlder(page, pageSize) {
    const ids = new Set();
    const placed = [];
    for (const message of [...page].reverse()) {
      const id = message.info.id;
      const held = this.messages.get(id);
      if (held?.info) continue;
      const entry = held ?? {info: null, parts: new Map(), order: [], v: bump()};
      entry.info = message.info;
      for (const part of message.parts) {
        // A part an event brought is at least as new as this page.
        if (entry.parts.has(part.id)) continue;
        part._v = bump();
        entry.parts.set(part.id, part);
        entry.order.push(part.id);
      }
      entry.order.sort();
      entry.v = bump();
      this.messages.set(id, entry);
      ids.add(id);
      placed.push({type: 'm', id});
    }
    this.items = [...placed, ...this.items.filter((item) => item.type !== 'm' || !ids.has(item.id))];
    this.hasOlder = page.length >= pageSize;
    this.structure = bump();
  }

  /**
   * The first page arrived: holds it, then applies the events that arrived meanwhile (and `earlier`:
   * events of this session the page had already seen, or texts saved before a reload), oldest first.
   */
  load(page, pageSize, earlier = []) {
    this.addOlder(page, pageSize);
    this.loaded = true;
    const events = [...earlier, ...this.buffer];
    this.buffer = [];
    for (const event of events) this.apply(event);
    this.settle();
  }

  /**
   * Parts known only from the snapshot that got deltas: the snapshot already holds some first run of
   * those deltas (up to its flush); keep the rest. The longest run the snapshot ends with is taken.
   */
  settle() {
    for (const [id, deltas] of this.pending) {
      const part = this.findPart(id);
      if (!part) continue;
      const text = part.text ?? '';
      let joined = deltas.join('');
      let skip = 0;
      for (let k = deltas.length; k > 0; k -= 1) {
        const run = deltas.slice(0, k).join('');
        if (text.endsWith(run)) {
          skip = k;
          break;
        }
      }
      joined = deltas.slice(skip).join('');
      part.text = text + joined;
      part._v = bump();
      this.touchMessage(part.message_id);
      this.anchored.add(id);
      this.structure = bump();
    }
    this.pending.clear();
    // From now on deltas are newer than the snapshot: they simply append.
    for (const entry of this.messages.values()) {
      for (const part of entry.parts.values()) if (isStreaming(part)) this.anchored.add(part.id);
    }
  }

  findPart(id) {
    for (const entry of this.messages.values()) {
      const part = entry.parts.get(id);
      if (part) return part;
    }
    return null;
  }

  touchMessage(id) {
    const entry = this.messages.get(id);
    if (entry) entry.v = bump();
  }

  /** A bus event of this session. Returns true when the rows changed shape (not only content). */
  apply(event) {
    if (!this.loaded) {
      this.buffer.push(event);
      return false;
    }
    const p = event.properties ?? {};
    const before = this.structure;
    switch (event.type) {
      case 'message.updated': {
        const entry = this.entry(p.info.id);
        entry.info = p.info;
        entry.v = bump();
        break;
      }
      case 'message.part.updated':
        this.putPart(p.part);
        break;
      case 'message.part.delta':
        this.delta(p);
        break;
      case 'session.updated':
        this.session = p.info;
        this.structure = bump();
        break;
      default:
        break;
    }
    return this.structure !== before;
  }

  putPart(part) {
    const entry = this.entry(part.message_id);
    const old = entry.parts.get(part.id);
    part._v = bump();
    entry.parts.set(part.id, part);
    if (!old) {
      entry.order.push(part.id);
      if (entry.order.length > 1 && entry.order[entry.order.length - 2] > part.id) entry.order.sort();
      this.structure = bump();
    } else if (visible(old) !== visible(part)) {
      this.structure = bump();
    }
    entry.v = bump();
    this.anchored.add(part.id);
    this.pending.delete(part.id);
  }

  delta({message_id, part_id, field, delta}) {
    const entry = this.messages.get(message_id);
    const part = entry?.parts.get(part_id);
    if (!part || field !== 'text') return;
    if (!this.anchored.has(part_id)) {
      // Known only from the snapshot: which deltas it holds is settled once the first page is in.
      if (!this.pending.has(part_id)) this.pending.set(part_id, []);
      this.pending.get(part_id).push(delta);
      return;
    }
    const was = visible(part);
    part.text = (part.text ?? '') + delta;
    part._v = bump();
    entry.v = bump();
    if (!was && visible(part)) this.structure = bump();
  }

  /**
   * A line of the page's own (a notice, or a job, limit or hook line). Lines of one `group` in a row
   * become one line with a count (an event type this page does not know, sent at every step).
   */
  notice(level, text, group = null) {
    const last = this.items[this.items.length - 1];
    if (group && last?.type === 'n' && last.group === group) {
      last.count += 1;
      last.text = `${text} (×${last.count})`;
      last.v = bump();
      return;
    }
    this.items.push({type: 'n', key: `n:${bump()}`, level, text, group, count: 1, v: bump()});
    this.structure = bump();
  }

  /** Open streaming parts with their texts, to carry over a reload (see `load`'s `earlier`). */
  streamingParts() {
    const out = [];
    for (const entry of this.messages.values()) {
      for (const part of entry.parts.values()) {
        if (isStreaming(part) && this.anchored.has(part.id)) out.push(withoutVersion(part));
      }
    }
    return out;
  }

  hiddenFrom() {
    return this.session?.revert?.message_id ?? null;
  }

  /** The newest user message still shown (what Undo reverts). */
  lastVisibleUser() {
    const hidden = this.hiddenFrom();
    for (let k = this.items.length - 1; k >= 0; k -= 1) {
      const item = this.items[k];
      if (item.type !== 'm' || (hidden && item.id >= hidden)) continue;
      const info = this.messages.get(item.id)?.info;
      if (info?.role === 'user') return item.id;
    }
    return null;
  }

  /** Tokens of the newest answer with usage (the size of the last request). */
  lastUsage() {
    for (let k = this.items.length - 1; k >= 0; k -= 1) {
      const item = this.items[k];
      if (item.type !== 'm') continue;
      const info = this.messages.get(item.id)?.info;
      if (info?.role !== 'assistant' || info.summary) continue;
      const t = info.tokens ?? {};
      const total = t.total || (t.input ?? 0) + (t.output ?? 0) + (t.reasoning ?? 0) + (t.cache?.read ?? 0) + (t.cache?.write ?? 0);
      if (total > 0) return total;
    }
    return null;
  }

  /** The newest assistant message's error text. */
  lastError() {
    for (let k = this.items.length - 1; k >= 0; k -= 1) {
      const item = this.items[k];
      if (item.type !== 'm') continue;
      const info = this.messages.get(item.id)?.info;
      if (info?.role === 'assistant') return info.error ? errorMessage(info.error) : null;
      if (info?.role === 'user') return null;
    }
    return null;
  }

  /** The rows of the timeline, oldest first. */
  rows() {
    const rows = [];
    rows.push(this.hasOlder ? {key: 'older', kind: 'older', v: 0} : {key: 'start', kind: 'start', v: 0});
    const hidden = this.hiddenFrom();
    let undone = 0;
    for (const item of this.items) {
      if (item.type === 'n') {
        rows.push({key: item.key, kind: 'notice', item});
        continue;
      }
      const entry = this.messages.get(item.id);
      if (!entry?.info) continue;
      if (hidden && item.id >= hidden) {
        if (entry.info.role === 'user') undone += 1;
        continue;
      }
      if (entry.info.role === 'user') {
        rows.push({key: `m:${item.id}`, kind: 'user', entry});
        continue;
      }
      if (entry.info.summary) {
        rows.push({key: `s:${item.id}`, kind: 'summary', entry});
        continue;
      }
      for (const id of entry.order) {
        const part = entry.parts.get(id);
        if (part && visible(part)) rows.push({key: `p:${id}`, kind: 'part', entry, id});
      }
      // A turn's figures once, under its last answer (not under each step that only called tools).
      const endsTurn = entry.info.time?.completed && entry.info.finish !== 'tool-calls';
      if (entry.info.error || endsTurn) rows.push({key: `f:${item.id}`, kind: 'footer', entry});
    }
    if (undone) rows.push({key: 'undone', kind: 'undone', count: undone, v: undone});
    return rows;
  }
}

/** The part a part row shows (looked up each time: an update replaces the part object). */
export function rowPart(row) {
  return row.entry.parts.get(row.id);
}

/** A row's current version: its node is built again when this changes. */
export function rowVersion(row) {
  switch (row.kind) {
    case 'part':
      return row.entry.parts.get(row.id)?._v;
    case 'user':
    case 'summary':
    case 'footer':
      return row.entry.v;
    case 'notice':
      return row.item.v;
    default:
      return row.v;
  }
}

/** Whether a part has a row of its own. */
export function visible(part) {
  switch (part.type) {
    case 'text':
      return !part.synthetic && !part.ignored && Boolean(part.text?.trim());
    case 'reasoning':
      return !part.ignored && Boolean(part.text?.trim());
    case 'tool':
      return !part.ignored;
    case 'patch':
      return (part.files ?? []).length > 0;
    case 'retry':
    case 'subtask':
    case 'file':
    case 'compaction':
      return true;
    default:
      return false;
  }
}

export function errorMessage(error) {
  if (!error) return '';
  if (typeof error === 'string') return error;
  return error.message ?? error.name ?? JSON.stringify(error);
}

export function isAborted(error) {
  return error?.name === 'Aborted';
}

function withoutVersion(part) {
  const copy = {...part};
  delete copy._v;
  return copy;
}
