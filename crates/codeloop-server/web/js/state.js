// What the page holds (the open session, the lists, the pickers' choices) and the small helpers every
// part of it shares.

import {rowVersion} from './convo.js';
import {renderRow} from './parts.js';
import {Timeline} from './timeline.js';
import {loadOlder} from './session.js';
import {painted} from './chrome.js';

export const TOKEN_KEY = 'codeloop.token';
export const RESUME_KEY = 'codeloop.resume';
/** Messages in the first page of a session (enough to fill a screen), then per older page. */
export const FIRST_PAGE = 16;
export const OLDER_PAGE = 200;
/** Recent events of every session, so a session opened mid-stream is rebuilt from them exactly. */
export const RING = 4000;
export const RING_TYPES = new Set(['message.updated', 'message.part.updated', 'message.part.delta']);

export const $ = (id) => document.getElementById(id);
export const root = document.documentElement;

export const app = {
  api: null,
  feed: null,
  sessions: new Map(),
  statuses: new Map(),
  convo: null,
  children: new Set(),
  permissions: [],
  questions: [],
  /** Files picked for the next message: {filename, mime, size, url}. */
  attachments: [],
  /** The shown session's todo list. */
  todos: [],
  /** The slash commands of the shown session's project (GET /command). */
  commands: [],
  /** MCP servers' requests for input (elicitations) of the session shown. */
  elicitations: [],
  models: [],
  agents: [],
  config: null,
  /** Chosen in the pickers for the next prompts (null: the session's own). */
  model: null,
  agent: null,
  // The effort picker (`null`: the agent's or model's).
  effort: null,
  queued: 0,
  ring: [],
  jobsOpen: false,
  loadingOlder: false,
  firstPaint: false,
  connection: 'connecting',
};

export const timeline = new Timeline($('timeline'), {
  rows: () => (app.convo ? app.convo.rows() : []),
  version: rowVersion,
  render: renderRow,
  onNearTop: () => loadOlder(),
  onPaint: () => painted(),
});

/** The session id of `#/session/ID`, or null. */
export function routeSession() {
  const m = /^#\/session\/([A-Za-z0-9_-]+)/.exec(location.hash);
  return m ? m[1] : null;
}

export function setRoute(id) {
  const hash = id ? `#/session/${id}` : '#/';
  if (location.hash !== hash) history.pushState(null, '', location.pathname + hash);
}

export function mine(sessionId) {
  return Boolean(app.convo) && (sessionId === app.convo.id || app.children.has(sessionId));
}

export function addAsk(list, request) {
  if (!mine(request.session_id) || list.some((r) => r.id === request.id)) return;
  list.push(request);
}

export function isBusy() {
  const status = app.convo ? app.statuses.get(app.convo.id) : null;
  return Boolean(status) && status.type !== 'idle';
}

export function notify(level, text, group = null) {
  if (!app.convo) {
    const bar = $('flash');
    bar.textContent = text;
    bar.hidden = false;
    return;
  }
  app.convo.notice(level, text, group);
  timeline.invalidateRows();
}

export function currentModel() {
  if (app.model) return app.model;
  const model = app.convo?.session?.model;
  if (model) return `${model.provider_id}/${model.model_id}`;
  return app.config?.model ?? null;
}

export function currentAgent() {
  return app.agent ?? app.convo?.session?.agent ?? app.agents.find((a) => a.default)?.name ?? 'build';
}
