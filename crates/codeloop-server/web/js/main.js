// The codeloop web page: the same sessions as the terminal UI, in a browser. A client of the documented
// API (GET /doc) and of GET /event, like any other; it holds no secret but the token it was opened with
// (`#token=…`, kept in this tab's session storage, sent only as `Authorization: Bearer`).

import {Api, ApiError, seg} from './api.js';
import {Feed} from './feed.js';
import {Convo, errorMessage, isAborted, rowVersion} from './convo.js';
import {Timeline} from './timeline.js';
import {opened, renderRow} from './parts.js';
import {jobList, permissionPrompt, questionPrompt, sessionList} from './panels.js';
import {clear, compact, ellipsize, h} from './dom.js';

const TOKEN_KEY = 'codeloop.token';
const RESUME_KEY = 'codeloop.resume';
/** Messages in the first page of a session (enough to fill a screen), then per older page. */
const FIRST_PAGE = 16;
const OLDER_PAGE = 200;
/** Recent events of every session, so a session opened mid-stream is rebuilt from them exactly. */
const RING = 4000;
const RING_TYPES = new Set(['message.updated', 'message.part.updated', 'message.part.delta']);

const $ = (id) => document.getElementById(id);
const root = document.documentElement;

const app = {
  api: null,
  feed: null,
  sessions: new Map(),
  statuses: new Map(),
  convo: null,
  children: new Set(),
  permissions: [],
  questions: [],
  models: [],
  agents: [],
  config: null,
  /** Chosen in the pickers for the next prompts (null: the session's own). */
  model: null,
  agent: null,
  queued: 0,
  ring: [],
  jobsOpen: false,
  loadingOlder: false,
  firstPaint: false,
  connection: 'connecting',
};

// ----- the address: token and route -----

/** Takes `token=…` out of the fragment (into session storage) and leaves the route. */
function takeToken() {
  const pieces = location.hash.replace(/^#/, '').split('&').filter(Boolean);
  let token = null;
  const rest = [];
  for (const piece of pieces) {
    if (piece.startsWith('token=')) {
      try {
        token = decodeURIComponent(piece.slice('token='.length));
      } catch {
        token = piece.slice('token='.length);
      }
    } else {
      rest.push(piece);
    }
  }
  if (token !== null) {
    sessionStorage.setItem(TOKEN_KEY, token);
    history.replaceState(null, '', location.pathname + (rest.length ? `#${rest.join('&')}` : ''));
  }
  return token ?? sessionStorage.getItem(TOKEN_KEY);
}

/** The session id of `#/session/ID`, or null. */
function routeSession() {
  const m = /^#\/session\/([A-Za-z0-9_-]+)/.exec(location.hash);
  return m ? m[1] : null;
}

function setRoute(id) {
  const hash = id ? `#/session/${id}` : '#/';
  if (location.hash !== hash) history.pushState(null, '', location.pathname + hash);
}

// ----- boot -----

const timeline = new Timeline($('timeline'), {
  rows: () => (app.convo ? app.convo.rows() : []),
  version: rowVersion,
  render: renderRow,
  onNearTop: () => loadOlder(),
  onPaint: painted,
});

function boot() {
  performance.mark('codeloop:boot');
  app.api = new Api(takeToken());
  let resume = null;
  try {
    resume = JSON.parse(sessionStorage.getItem(RESUME_KEY) ?? 'null');
  } catch {
    resume = null;
  }
  sessionStorage.removeItem(RESUME_KEY);
  app.feed = new Feed(app.api, {event: onEvent, control: onControl, state: onConnection});
  wireUi();
  const id = routeSession();
  // The session is opened before the stream starts, so every event of it is held until its first page
  // is in; the lists wait for that page (a browser opens few connections to one server at a time).
  if (id) openSession(id, resume?.session === id ? resume : null).finally(loadLists);
  else showEmpty();
  app.feed.start(resume && typeof resume.lastId === 'number' ? resume.lastId : null);
  if (!id) loadLists();
  addEventListener('pagehide', saveResume);
  addEventListener('popstate', () => {
    const target = routeSession();
    if (target && target !== app.convo?.id) openSession(target);
    else if (!target) showEmpty();
  });
}

/** Before a reload: where the stream was and the texts still streaming, to pick up exactly there. */
function saveResume() {
  if (app.feed?.lastId === null || app.feed?.lastId === undefined) return;
  const convo = app.convo;
  const resume = {lastId: app.feed.lastId, session: convo?.loaded ? convo.id : null, parts: convo?.loaded ? convo.streamingParts() : []};
  try {
    sessionStorage.setItem(RESUME_KEY, JSON.stringify(resume));
  } catch {
    // Storage full: a reload then rebuilds from the stored snapshot.
  }
}

async function loadLists() {
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

// ----- sessions -----

function showEmpty() {
  app.convo = null;
  app.children = new Set();
  app.permissions = [];
  app.questions = [];
  app.queued = 0;
  timeline.reset();
  document.title = 'codeloop';
  $('title').textContent = 'New session';
  renderAsks();
  renderChrome();
  renderSessions();
}

async function openSession(id, resume = null) {
  if (app.convo?.id === id && !resume) return;
  const convo = new Convo(id);
  // Events of this session seen before now: the rest arrive into the convo's buffer.
  const earlier = resume
    ? (resume.parts ?? []).map((part) => ({type: 'message.part.updated', properties: {session_id: id, part}}))
    : app.ring.filter((event) => event.properties?.session_id === id);
  app.convo = convo;
  app.children = new Set();
  app.permissions = [];
  app.questions = [];
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

async function loadAsks(convo) {
  const id = convo.id;
  const [children, permissions, questions] = await Promise.allSettled([
    app.api.get(`/session/${seg(id)}/children`),
    app.api.get('/permission'),
    app.api.get('/question'),
  ]);
  if (app.convo !== convo) return;
  if (children.status === 'fulfilled') for (const child of children.value) app.children.add(child.id);
  if (permissions.status === 'fulfilled') for (const request of permissions.value) addAsk(app.permissions, request);
  if (questions.status === 'fulfilled') for (const request of questions.value) addAsk(app.questions, request);
  renderAsks();
}

function mine(sessionId) {
  return Boolean(app.convo) && (sessionId === app.convo.id || app.children.has(sessionId));
}

function addAsk(list, request) {
  if (!mine(request.session_id) || list.some((r) => r.id === request.id)) return;
  list.push(request);
}

async function loadOlder() {
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

async function newSession(directory) {
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

// ----- events -----

function onControl(type) {
  if (type === 'resync') {
    // Events were lost: what is shown is rebuilt from the server, and the stream read again from a
    // little before now (the window of recent events a streaming text is rebuilt from).
    app.ring = [];
    app.feed.reprime();
    const id = app.convo?.id;
    if (id) {
      app.convo = null;
      openSession(id);
    }
    loadLists();
    return;
  }
  if (type === 'server.instance.disposed') notify('warn', 'The server is shutting down.');
}

function onConnection(state) {
  app.connection = state;
  if (state === 'unauthorized') needToken();
  renderConnection();
}

function remember(event) {
  if (!RING_TYPES.has(event.type)) return;
  app.ring.push(event);
  if (app.ring.length > RING) app.ring.splice(0, app.ring.length - RING);
}

function onEvent(event) {
  remember(event);
  const p = event.properties ?? {};
  const sid = p.session_id ?? null;
  const convo = app.convo;
  const current = Boolean(convo) && sid === convo.id;
  switch (event.type) {
    case 'session.created':
    case 'session.updated': {
      const info = p.info;
      if (!info) break;
      if (!info.parent_id) app.sessions.set(info.id, info);
      if (info.parent_id && (mine(info.parent_id))) app.children.add(info.id);
      if (current) {
        convo.apply(event);
        document.title = `${info.title} · codeloop`;
        timeline.invalidateRows();
        renderChrome();
        renderPickers();
      }
      renderSessions();
      break;
    }
    case 'session.deleted':
      app.sessions.delete(sid);
      if (current) notify('warn', 'This session was deleted elsewhere: start a new one or pick another.');
      renderSessions();
      break;
    case 'session.status':
      app.statuses.set(sid, p.status);
      if (p.status?.type === 'retry' && current) notify('warn', `retrying (attempt ${p.status.attempt}/${p.status.max_attempts}): ${p.status.message}`);
      if (current) renderChrome();
      renderSessions();
      break;
    case 'session.idle':
      app.statuses.set(sid, {type: 'idle'});
      if (current) {
        app.queued = 0;
        renderChrome();
      }
      renderSessions();
      break;
    case 'session.error':
      if (current && !isAborted(p.error) && convo.lastError() !== errorMessage(p.error)) notify('error', errorMessage(p.error));
      break;
    case 'session.compacted':
      if (current) notify('info', 'Context compacted: older messages were summarised.');
      break;
    case 'todo.updated':
      if (current) {
        const todos = p.todos ?? [];
        const done = todos.filter((t) => t.status === 'completed').length;
        notify('dim', `☑ todo list: ${done}/${todos.length} done${todos.find((t) => t.status === 'in_progress') ? ` — now: ${todos.find((t) => t.status === 'in_progress').content}` : ''}`);
      }
      break;
    case 'permission.asked':
      addAsk(app.permissions, p);
      renderAsks();
      break;
    case 'permission.replied':
      app.permissions = app.permissions.filter((r) => r.id !== p.request_id);
      renderAsks();
      break;
    case 'question.asked':
      addAsk(app.questions, p);
      renderAsks();
      break;
    case 'question.replied':
    case 'question.rejected':
      app.questions = app.questions.filter((r) => r.id !== p.request_id);
      renderAsks();
      break;
    case 'message.updated':
      if (current) {
        if (p.info?.role === 'user' && !convo.messages.has(p.info.id) && app.queued > 0 && isBusy()) app.queued -= 1;
        if (convo.apply(event)) timeline.invalidateRows();
        else timeline.refresh();
        renderChrome();
      }
      break;
    case 'message.part.updated':
    case 'message.part.delta':
      if (current) {
        if (convo.apply(event)) timeline.invalidateRows();
        else timeline.refresh();
      }
      break;
    case 'job.started':
      if (current) {
        convo.jobs.set(p.job_id, {id: p.job_id, command: p.command, state: 'running'});
        notify('dim', `⚙ job ${p.job_id} started: ${ellipsize(p.command ?? '', 200)}`);
        if (app.jobsOpen) loadJobs();
      }
      break;
    case 'job.exited':
      if (convo?.jobs.has(p.job_id)) {
        const job = convo.jobs.get(p.job_id);
        job.state = p.state ?? 'exited';
        job.exit_code = p.exit_code;
        notify('dim', `⚙ job ${p.job_id} ${job.state}${p.exit_code !== undefined && p.exit_code !== null ? ` (exit ${p.exit_code})` : ''}`);
        if (app.jobsOpen) loadJobs();
      }
      break;
    case 'session.limit':
      if (current || !sid) notify('error', `⛔ limit ${p.limit} reached: ${p.used} of ${p.value}`);
      break;
    case 'hook.ran':
      if (current || !sid) {
        const took = p.duration_ms !== undefined ? `, ${p.duration_ms} ms` : '';
        const code = p.exit_code !== undefined && p.exit_code !== null ? `exit ${p.exit_code}` : 'no exit code';
        notify(p.decision === 'block' || p.decision === 'deny' ? 'warn' : 'dim', `⚓ hook ${p.event} (${p.source}): ${ellipsize(p.command ?? '', 120)} → ${p.decision ?? 'none'} (${code}${took})`);
      }
      break;
    case 'worker.request':
      break;
    default:
      // A type this page does not know (a newer server): one line, for this session or for none.
      if (current || (!sid && !event.type.startsWith('server.'))) notify('dim', `${event.type}: ${ellipsize(JSON.stringify(p), 300)}`, event.type);
      break;
  }
}

function notify(level, text, group = null) {
  if (!app.convo) {
    const bar = $('flash');
    bar.textContent = text;
    bar.hidden = false;
    return;
  }
  app.convo.notice(level, text, group);
  timeline.invalidateRows();
}

// ----- what a person does -----

function isBusy() {
  const status = app.convo ? app.statuses.get(app.convo.id) : null;
  return Boolean(status) && status.type !== 'idle';
}

async function send(delivery) {
  const input = $('input');
  const text = input.value;
  if (!text.trim()) return;
  let convo = app.convo;
  if (!convo) {
    input.disabled = true;
    const session = await newSession(null);
    input.disabled = false;
    if (!session) return;
    convo = app.convo;
  }
  const busy = isBusy();
  const body = {parts: [{type: 'text', text}], delivery: busy ? delivery : 'queue'};
  if (app.model) body.model = app.model;
  if (app.agent) body.agent = app.agent;
  input.value = '';
  autosize();
  try {
    await app.api.post(`/session/${seg(convo.id)}/prompt_async`, body);
    if (busy && delivery === 'queue') {
      app.queued += 1;
      notify('info', `Queued (sent when the run ends): ${ellipsize(text.split('\n')[0], 80)}`);
    } else if (busy) {
      notify('info', `Steering: ${ellipsize(text.split('\n')[0], 80)}`);
    }
    if (!busy) app.statuses.set(convo.id, {type: 'busy'});
    timeline.toBottom();
  } catch (e) {
    if (!input.value) input.value = text;
    notify('error', `Not sent: ${e.message}`);
  }
  renderChrome();
}

async function abort() {
  const convo = app.convo;
  if (!convo || !isBusy()) return;
  $('stop').disabled = true;
  try {
    await app.api.post(`/session/${seg(convo.id)}/abort`);
  } catch (e) {
    notify('error', `Cannot stop the run: ${e.message}`);
  } finally {
    $('stop').disabled = false;
  }
}

async function replyPermission(request, reply, message) {
  const body = {reply};
  if (message) body.message = message;
  app.permissions = app.permissions.filter((r) => r.id !== request.id);
  renderAsks();
  try {
    await app.api.post(`/permission/${seg(request.id)}/reply`, body);
  } catch (e) {
    // 409: someone else answered first.
    if (e.status !== 409) notify('error', `The answer was not taken: ${e.message}`);
  }
}

async function replyQuestion(request, answers) {
  app.questions = app.questions.filter((r) => r.id !== request.id);
  renderAsks();
  try {
    if (answers) await app.api.post(`/question/${seg(request.id)}/reply`, {answers});
    else await app.api.post(`/question/${seg(request.id)}/reject`);
  } catch (e) {
    if (e.status !== 409) notify('error', `The answer was not taken: ${e.message}`);
  }
}

async function undo() {
  const convo = app.convo;
  if (!convo) return;
  if (isBusy()) return notify('warn', 'A run is active: press Stop (or Esc) first, then Undo.');
  const message = convo.lastVisibleUser();
  if (!message) return notify('warn', 'Nothing to undo.');
  try {
    const session = await app.api.post(`/session/${seg(convo.id)}/revert`, {message_id: message});
    convo.session = session;
    notify('info', `Undone: the last turn and the files it changed${session.revert?.files?.length ? ` (${session.revert.files.join(', ')})` : ''}.`);
  } catch (e) {
    notify('error', `Cannot undo: ${e.message}`);
  }
  renderChrome();
}

async function redo() {
  const convo = app.convo;
  if (!convo) return;
  if (isBusy()) return notify('warn', 'A run is active: press Stop (or Esc) first, then Redo.');
  if (!convo.hiddenFrom()) return notify('warn', 'Nothing to redo.');
  try {
    convo.session = await app.api.post(`/session/${seg(convo.id)}/unrevert`);
    notify('info', 'Redone: the turn and its files are back.');
  } catch (e) {
    notify('error', `Cannot redo: ${e.message}`);
  }
  renderChrome();
}

async function compactNow() {
  const convo = app.convo;
  if (!convo) return;
  if (isBusy()) return notify('warn', 'A run is active: press Stop (or Esc) first, then Compact.');
  notify('info', 'Compacting: summarising the conversation…');
  app.statuses.set(convo.id, {type: 'busy'});
  renderChrome();
  try {
    await app.api.post(`/session/${seg(convo.id)}/compact`);
  } catch (e) {
    notify('error', `Cannot compact: ${e.message}`);
    app.statuses.set(convo.id, {type: 'idle'});
    renderChrome();
  }
}

async function exportSession() {
  const convo = app.convo;
  if (!convo) return;
  try {
    const messages = [];
    let before;
    for (;;) {
      const page = await app.api.get(`/session/${seg(convo.id)}/message`, {limit: 1000, before});
      messages.push(...page);
      if (page.length < 1000) break;
      before = page[page.length - 1].info.id;
    }
    messages.reverse();
    const blob = new Blob([JSON.stringify({info: convo.session, messages}, null, 2)], {type: 'application/json'});
    const url = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = url;
    a.download = `${convo.id}.json`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  } catch (e) {
    notify('error', `Cannot export: ${e.message}`);
  }
}

async function loadJobs() {
  const convo = app.convo;
  const el = $('jobs');
  const actions = {kill: killJob, close: toggleJobs};
  if (!convo) return jobList(el, [], actions, 'Open a session to see its jobs.');
  try {
    const jobs = await app.api.get(`/session/${seg(convo.id)}/job`);
    if (app.convo === convo) jobList(el, jobs, actions);
  } catch (e) {
    const note = e.code === 'route_not_found' ? 'This server has no jobs API.' : `Cannot list the jobs: ${e.message}`;
    if (app.convo === convo) jobList(el, [...convo.jobs.values()], actions, note);
  }
}

async function killJob(job) {
  const convo = app.convo;
  if (!convo) return;
  try {
    await app.api.post(`/session/${seg(convo.id)}/job/${seg(job)}/kill`);
  } catch (e) {
    notify('error', `Cannot kill ${job}: ${e.message}`);
  }
  loadJobs();
}

function toggleJobs() {
  app.jobsOpen = !app.jobsOpen;
  $('jobs').hidden = !app.jobsOpen;
  $('jobs-toggle').setAttribute('aria-pressed', String(app.jobsOpen));
  if (app.jobsOpen) loadJobs();
}

function needToken() {
  if (!$('login').hidden) return;
  app.feed?.stop();
  $('login').hidden = false;
  $('token').focus();
}

// ----- rendering the chrome -----

let sessionsFrame = 0;
function renderSessions() {
  if (!sessionsFrame) sessionsFrame = requestAnimationFrame(paintSessions);
}

function paintSessions() {
  sessionsFrame = 0;
  sessionList($('sessions'), [...app.sessions.values()], app.statuses, app.convo?.id ?? null, {
    open: (id) => openSession(id),
    create: (directory) => newSession(directory),
  });
}

function renderAsks() {
  const el = $('asks');
  clear(el);
  const permission = app.permissions[0];
  if (permission) {
    const reply = (kind, message) => replyPermission(permission, kind, message);
    el.appendChild(permissionPrompt(permission, app.permissions.length - 1, reply, askedCall(permission)));
  } else if (app.questions[0]) {
    const question = app.questions[0];
    el.appendChild(questionPrompt(question, (answers) => replyQuestion(question, answers), () => replyQuestion(question, null)));
  }
  el.hidden = !el.firstChild;
  renderChrome();
}

/** What the call a permission is asked for works on, in full (its command, path or address). */
function askedCall(request) {
  const ref = request.tool;
  const entry = ref ? app.convo?.messages.get(ref.message_id) : null;
  for (const part of entry?.parts.values() ?? []) {
    if (part.type !== 'tool' || part.call_id !== ref.call_id) continue;
    const input = part.state?.input ?? {};
    const text = [input.command, input.filePath, input.url, input.pattern].find((v) => typeof v === 'string');
    if (text) return text;
  }
  return null;
}

function currentModel() {
  if (app.model) return app.model;
  const model = app.convo?.session?.model;
  if (model) return `${model.provider_id}/${model.model_id}`;
  return app.config?.model ?? null;
}

function currentAgent() {
  return app.agent ?? app.convo?.session?.agent ?? app.agents.find((a) => a.default)?.name ?? 'build';
}

let pickersShown = '';
function renderPickers() {
  const model = $('model');
  const chosen = currentModel();
  const ids = app.models.map((m) => m.id);
  if (chosen && !ids.includes(chosen)) ids.unshift(chosen);
  const current = currentAgent();
  // Rebuilt only when something changed (a rebuild closes a picker that is open).
  const shown = JSON.stringify([ids, chosen, app.agents, current]);
  if (shown === pickersShown) return;
  pickersShown = shown;
  clear(model);
  if (!ids.length) model.appendChild(h('option', {value: ''}, 'default model'));
  for (const id of ids) model.appendChild(h('option', {value: id, selected: id === chosen}, id));
  const agent = $('agent');
  const names = app.agents.map((a) => a.name);
  if (!names.includes(current)) names.unshift(current);
  clear(agent);
  for (const name of names) {
    const info = app.agents.find((a) => a.name === name);
    agent.appendChild(h('option', {value: name, selected: name === current, title: info?.description}, name));
  }
}

let chromeFrame = 0;
function renderChrome() {
  if (!chromeFrame) chromeFrame = requestAnimationFrame(paintChrome);
}

function paintChrome() {
  chromeFrame = 0;
  const convo = app.convo;
  const busy = isBusy();
  const status = convo ? app.statuses.get(convo.id) : null;
  $('title').textContent = convo?.session?.title ?? (convo ? 'Loading…' : 'New session');
  const state = $('state');
  state.textContent = status?.type === 'retry' ? `retrying (${status.attempt}/${status.max_attempts})` : busy ? '● working' : 'idle';
  state.className = busy ? 'state busy' : 'state';
  $('stop').hidden = !busy;
  $('steer').hidden = !busy;
  $('send').textContent = busy ? 'Queue' : 'Send';
  $('input').placeholder = busy
    ? 'Enter queues a message for after this run · Ctrl+Enter steers it now · Esc stops'
    : 'Message (Enter sends, Shift+Enter new line)';
  const session = convo?.session;
  const model = currentModel();
  const entry = app.models.find((m) => m.id === model);
  const used = convo?.lastUsage();
  $('context').textContent = used && entry?.limit?.context ? `${Math.round((100 * used) / entry.limit.context)}% context` : used ? `${compact(used)} tokens` : '–% context';
  $('context').title = used ? `${used} tokens in the last request` : '';
  $('cost').textContent = `$${(session?.cost ?? 0).toFixed(4)}`;
  $('cost').title = session ? `${session.tokens?.input ?? 0} in · ${session.tokens?.output ?? 0} out` : '';
  $('queued').textContent = app.queued ? `${app.queued} queued` : '';
  $('session-id').textContent = convo?.id ?? '';
  for (const id of ['undo', 'redo', 'compact', 'export', 'jobs-toggle']) $(id).disabled = !convo;
  $('redo').disabled = !convo?.hiddenFrom();
  renderConnection();
}

function renderConnection() {
  const el = $('conn');
  const text = {open: '', connecting: 'connecting…', retrying: 'reconnecting…', unauthorized: 'token needed'}[app.connection] ?? '';
  el.textContent = text;
  el.hidden = !text;
}

function painted() {
  root.dataset.paints = String(timeline.paints);
  root.dataset.rows = String(timeline.rendered());
  const convo = app.convo;
  if (!app.firstPaint && convo?.loaded && timeline.rows.length > 1) {
    app.firstPaint = true;
    performance.mark('codeloop:first-frame');
    // Called inside the animation frame that drew it: a task queued now runs once that frame is on screen.
    setTimeout(() => (root.dataset.firstPaint = performance.now().toFixed(1)), 0);
  }
}

// ----- wiring -----

function autosize() {
  const input = $('input');
  input.style.height = 'auto';
  input.style.height = `${Math.min(input.scrollHeight, Math.round(innerHeight * 0.4))}px`;
}

function closeSidebar() {
  document.body.classList.remove('sidebar-open');
}

function wireUi() {
  const input = $('input');
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    send('queue');
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send(e.ctrlKey || e.metaKey ? 'steer' : 'queue');
    }
  });
  input.addEventListener('input', autosize);
  $('steer').addEventListener('click', () => send('steer'));
  $('stop').addEventListener('click', abort);
  $('new-session').addEventListener('click', () => {
    setRoute(null);
    showEmpty();
    closeSidebar();
    input.focus();
  });
  $('undo').addEventListener('click', undo);
  $('redo').addEventListener('click', redo);
  $('compact').addEventListener('click', compactNow);
  $('export').addEventListener('click', exportSession);
  $('jobs-toggle').addEventListener('click', toggleJobs);
  $('menu').addEventListener('click', () => document.body.classList.toggle('sidebar-open'));
  $('scrim').addEventListener('click', closeSidebar);
  $('model').addEventListener('change', (e) => {
    app.model = e.target.value || null;
    renderChrome();
  });
  $('agent').addEventListener('change', (e) => {
    app.agent = e.target.value || null;
    renderChrome();
  });
  $('timeline').addEventListener('click', (e) => {
    const fold = e.target.closest?.('[data-fold]');
    if (!fold) return;
    const key = fold.dataset.fold;
    if (opened.has(key)) opened.delete(key);
    else opened.add(key);
    timeline.keep(key);
    timeline.invalidate(key);
  });
  // A fold a person opens or closes (reasoning, a summary) stays where it was. `toggle` does not bubble:
  // this listener captures it, before the fold's own records the new state, so a fold opened again by
  // a re-render (already recorded) is told apart.
  $('timeline').addEventListener(
    'toggle',
    (e) => {
      const key = e.target.closest?.('[data-key]')?.dataset.key;
      if (key && e.target.open !== opened.has(key)) timeline.keep(key);
    },
    true,
  );
  $('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const token = $('token').value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    location.reload();
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && isBusy()) {
      e.preventDefault();
      abort();
      return;
    }
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement?.tagName ?? '');
    if (typing || e.ctrlKey || e.metaKey || e.altKey || !app.permissions[0]) return;
    const reply = {y: 'once', a: 'always', n: 'reject'}[e.key];
    if (reply) {
      e.preventDefault();
      replyPermission(app.permissions[0], reply, null);
    }
  });
  $('flash').addEventListener('click', () => ($('flash').hidden = true));
}

boot();
