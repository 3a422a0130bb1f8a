// Sessions: the lists (sessions, statuses, models, agents), opening one (its first page, held events,
// the pending asks), older pages as they come into view, a new session, and what a reload carries over.

import {ApiError, seg} from './api.js';
import {Convo} from './convo.js';
import {$, FIRST_PAGE, OLDER_PAGE, RESUME_KEY, addAsk, app, notify, root, setRoute, timeline} from './state.js';
import {closeSidebar, renderAsks, renderChrome, renderPickers, renderSessions} from './chrome.js';
import {needToken} from './actions.js';
import {loadCommands} from './commands.js';
import {setProjectDir} from './parts.js';
import {loadTodos, setTodos} from './todos.js';

/** Before a reload: where the stream was and the texts still streaming, to pick up exactly there. */
export function saveResume() {
  if (app.feed?.lastId === null || app.feed?.lastId === undefined) return;
  const convo = app.convo;
  const resume = {lastId: app.feed.lastId, session: convo?.loaded ? convo.id : null, parts: convo?.loaded ? convo.streamingParts() : []};
  try {
    sessionStorage.setItem(RESUME_KEY, JSON.stringify(resume));
  } catch {
    // Storage full: a reload then rebuilds from the stored snapshot.
  }
}

export async function loadLists() {
  const api = app.api;
  const [sessions, statuses, models, agents, config] = await Promise.allSettled([
    api.get('/session', {roots: true, limit: 500}),
    api.get('/session/status'),
    api.get('/models'),
    api.get('/agent'),
    api.get('/config'),
  ]);
  if (sessions.status === 'fulfilled') for (const s of sessions.value) app.sessions.set(s.id, s);
  if (statuses.status === 'fulfilled') for (const [id, status] of Object.entries(statuses.value ?? {})) app.statuses.set(id, status);
  if (models.status === 'fulfilled') app.models = models.value;
  if (agents.status === 'fulfilled') app.agents = agents.value;
  if (config.status === 'fulfilled') app.config = config.value;
  const failed = [sessions, statuses].find((r) => r.status === 'rejected');
  if (failed && failed.reason instanceof ApiError && failed.reason.status === 401) needToken();
  renderSessions();
  renderPickers();
  renderChrome();
}

export function showEmpty() {
  app.convo = null;
  setTodos([]);
  // A new session starts in the server's directory: its commands are the ones to offer.
  loadCommands(null);
  app.children = new Set();
  app.permissions = [];
  app.questions = [];
  app.elicitations = [];
  app.queued = 0;
  timeline.reset();
  document.title = 'codeloop';
  $('title').textContent = 'New session';
  renderAsks();
  renderChrome();
  renderSessions();
}

export async function openSession(id, resume = null) {
  if (app.convo?.id === id && !resume) return;
  const convo = new Convo(id);
  // Events of this session seen before now: the rest arrive into the convo's buffer.
  const earlier = resume
    ? (resume.parts ?? []).map((part) => ({type: 'message.part.updated', properties: {session_id: id, part}}))
    : app.ring.filter((event) => event.properties?.session_id === id);
  app.convo = convo;
  setProjectDir(app.sessions.get(id)?.directory ?? null);
  setTodos([]);
  app.children = new Set();
  app.permissions = [];
  app.questions = [];
  app.elicitations = [];
  app.queued = 0;
  app.model = null;
  app.agent = null;
  app.firstPaint = false;
  delete root.dataset.firstPaint;
  setRoute(id);
  timeline.reset();
  renderAsks();
  renderChrome();
  renderSessions();
  closeSidebar();
  // The page is read once the stream has started, so nothing published in between is missed; after a
  // reload the stream replays from where the last page stopped, so the page need not wait.
  if (!resume) await app.feed.ready();
  if (app.convo !== convo) return;
  let session;
  let page;
  let size = FIRST_PAGE;
  try {
    // boot.js may have asked already (a reload of this session).
    const early = resume && window.codeloopEarly?.session === id ? window.codeloopEarly : null;
    window.codeloopEarly = null;
    if (early) size = early.limit;
    [session, page] = await Promise.all([
      early ? app.api.read(early.info) : app.api.get(`/session/${seg(id)}`),
      early ? app.api.read(early.page) : app.api.get(`/session/${seg(id)}/message`, {limit: FIRST_PAGE}),
    ]);
  } catch (e) {
    if (app.convo !== convo) return;
    if (e.status === 401) return needToken();
    convo.loaded = true;
    convo.hasOlder = false;
    convo.notice('error', e.status === 404 || e.status === 400 ? `Session ${id} was not found: pick another or start a new one.` : `Cannot load the session: ${e.message}`);
    timeline.invalidateRows();
    return;
  }
  if (app.convo !== convo) return;
  convo.session = session;
  app.sessions.set(session.id, {...app.sessions.get(session.id), ...session});
  performance.mark('codeloop:page-in');
  convo.load(page, size, earlier);
  document.title = `${session.title} · codeloop`;
  timeline.invalidateRows();
  renderChrome();
  renderPickers();
  renderSessions();
  loadAsks(convo);
}

export async function loadAsks(convo) {
  const id = convo.id;
  loadCommands(app.sessions.get(id)?.directory ?? null);
  loadTodos(id);
  const [children, permissions, questions, elicitations] = await Promise.allSettled([
    app.api.get(`/session/${seg(id)}/children`),
    app.api.get('/permission'),
    app.api.get('/question'),
    app.api.get(`/session/${seg(id)}/elicitation`),
  ]);
  if (app.convo !== convo) return;
  if (children.status === 'fulfilled') for (const child of children.value) app.children.add(child.id);
  if (permissions.status === 'fulfilled') for (const request of permissions.value) addAsk(app.permissions, request);
  if (questions.status === 'fulfilled') for (const request of questions.value) addAsk(app.questions, request);
  if (elicitations.status === 'fulfilled') for (const request of elicitations.value) addAsk(app.elicitations, request);
  renderAsks();
}

export async function loadOlder() {
  const convo = app.convo;
  if (!convo?.loaded || !convo.hasOlder || app.loadingOlder) return;
  const before = convo.oldestId();
  if (!before) return;
  app.loadingOlder = true;
  try {
    const page = await app.api.get(`/session/${seg(convo.id)}/message`, {limit: OLDER_PAGE, before});
    if (app.convo === convo) {
      convo.addOlder(page, OLDER_PAGE);
      timeline.invalidateRows();
    }
  } catch (e) {
    if (app.convo === convo) {
      convo.hasOlder = false;
      convo.notice('error', `Cannot load older messages: ${e.message}`);
      timeline.invalidateRows();
    }
  } finally {
    app.loadingOlder = false;
  }
}

export async function newSession(directory) {
  const body = {};
  if (directory) body.directory = directory;
  if (app.agent) body.agent = app.agent;
  if (app.model) body.model = app.model;
  try {
    const session = await app.api.post('/session', body);
    app.sessions.set(session.id, session);
    await openSession(session.id);
    $('input').focus();
    return session;
  } catch (e) {
    notify('error', `Cannot start a session: ${e.message}`);
    return null;
  }
}
