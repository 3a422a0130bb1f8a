// GET /event read with fetch (an EventSource cannot send the Authorization header) and parsed as
// Server-Sent Events here. A dropped stream reconnects with Last-Event-ID, so the server replays what was
// missed: no event is lost or seen twice. Nothing polls: the stream is read as it arrives, a reconnect
// waits on a timer only after a failure, and a silent stream (no heartbeat for a while) is dropped.

/** The server sends a heartbeat every 10 s; a stream silent for this long is dead. */
const SILENCE_MS = 35000;
/**
 * A first connection asks again for this many events before "now" (they fill the page's window of
 * recent events, so a session opened while it streams is rebuilt from events, not from a snapshot
 * that lags the stream).
 */
const PRIME = 2000;
/** Waits before reconnecting, growing with each failure in a row. */
const BACKOFF_MS = [250, 500, 1000, 2000, 4000, 8000];

export class Feed {
  /**
   * `handlers.event(event)` gets every bus event (parsed JSON with its `id`) in order;
   * `handlers.control(type, properties)` the stream's own events (`server.connected`, `resync`, …);
   * `handlers.state(state, detail)` says `connecting`, `open`, `retrying` or `unauthorized`.
   */
  constructor(api, handlers) {
    this.api = api;
    this.handlers = handlers;
    /** Id of the newest bus event handed to `handlers.event`. */
    this.lastId = null;
    this.abort = null;
    this.failures = 0;
    this.stopped = false;
    this.silence = null;
    this.priming = false;
    this.again = false;
    this.reprimed = 0;
    this.readyNow();
  }

  /** A new promise for `ready()`. */
  readyNow() {
    this.readyPromise = new Promise((resolve) => (this.readyResolve = resolve));
  }

  /** Resolves once the stream is open: every event published from then on reaches `handlers.event`. */
  ready() {
    return this.readyPromise;
  }

  /**
   * After a `resync` (events were lost): read again from a little before now, at once. Returns false
   * when that was just done (the server cannot go back that far: the stream goes on as it is).
   */
  reprime() {
    if (Date.now() - this.reprimed < 10000) return false;
    this.reprimed = Date.now();
    this.readyNow();
    this.lastId = null;
    this.priming = true;
    this.again = true;
    if (this.abort) this.abort.abort();
    return true;
  }

  /** Starts reading: after `lastId` when given, else from a little before now. */
  start(lastId = null) {
    this.lastId = lastId;
    this.priming = lastId === null;
    this.stopped = false;
    this.loop();
  }

  stop() {
    this.stopped = true;
    if (this.abort) this.abort.abort();
    clearTimeout(this.silence);
  }

  async loop() {
    while (!this.stopped) {
      const outcome = await this.once();
      if (this.stopped || outcome === 'unauthorized') return;
      if (this.again) {
        this.again = false;
        continue;
      }
      const wait = BACKOFF_MS[Math.min(this.failures, BACKOFF_MS.length - 1)];
      this.failures += 1;
      this.handlers.state('retrying', wait);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  /** One connection, read until it ends. */
  async once() {
    this.handlers.state('connecting');
    const abort = new AbortController();
    this.abort = abort;
    const headers = this.api.headers({Accept: 'text/event-stream'});
    if (this.lastId !== null) headers['Last-Event-ID'] = String(this.lastId);
    let response;
    performance.mark('codeloop:event-request');
    try {
      response = await fetch('/event', {headers, signal: abort.signal, cache: 'no-store', credentials: 'omit'});
    } catch {
      return 'failed';
    }
    if (response.status === 401) {
      this.handlers.state('unauthorized');
      return 'unauthorized';
    }
    if (!response.ok || !response.body) return 'failed';
    performance.mark('codeloop:event-response');
    const reader = response.body.getReader();
    const parser = new SseParser((message) => this.dispatch(message));
    const decoder = new TextDecoder();
    this.armSilence(abort);
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        this.armSilence(abort);
        parser.push(decoder.decode(value, {stream: true}));
      }
    } catch {
      // Aborted or dropped: reconnect.
    } finally {
      clearTimeout(this.silence);
    }
    return 'ended';
  }

  armSilence(abort) {
    clearTimeout(this.silence);
    this.silence = setTimeout(() => abort.abort(), SILENCE_MS);
  }

  dispatch(message) {
    // This connection is being replaced (see `priming`): what else it carried comes again.
    if (this.again) return;
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      return;
    }
    const type = typeof data?.type === 'string' ? data.type : '';
    if (type === 'server.connected') {
      const position = data.properties?.last_event_id;
      if (this.priming) {
        // Ask again from a little before the position, at once.
        this.priming = false;
        if (typeof position === 'number' && position > 0) {
          this.lastId = Math.max(0, position - PRIME);
          this.again = true;
          this.abort.abort();
          return;
        }
      }
      performance.mark('codeloop:event-connected');
      this.failures = 0;
      this.readyResolve();
      // On a first connection it carries the bus position: a reconnect resumes from there.
      if (this.lastId === null && typeof position === 'number') this.lastId = position;
      this.handlers.state('open');
      this.handlers.control(type, data.properties ?? {});
      return;
    }
    // A bus event carries its id in the frame and in the JSON; control frames have none.
    if (message.id !== null && typeof data.id === 'number') {
      if (this.lastId !== null && data.id <= this.lastId) return;
      this.lastId = data.id;
      this.handlers.event(data);
      return;
    }
    this.handlers.control(type, data.properties ?? {});
  }
}

/** The text/event-stream format: fields per line, a blank line ends a message. */
export class SseParser {
  constructor(onMessage) {
    this.onMessage = onMessage;
    this.buffer = '';
    this.data = [];
    this.id = null;
    this.event = '';
  }

  push(text) {
    this.buffer += text;
    let start = 0;
    for (;;) {
      const end = this.buffer.indexOf('\n', start);
      if (end < 0) break;
      let line = this.buffer.slice(start, end);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      this.line(line);
      start = end + 1;
    }
    this.buffer = this.buffer.slice(start);
  }

  line(line) {
    if (line === '') {
      if (this.data.length) this.onMessage({id: this.id, event: this.event || 'message', data: this.data.join('\n')});
      this.data = [];
      this.event = '';
      this.id = null;
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
  }
}
