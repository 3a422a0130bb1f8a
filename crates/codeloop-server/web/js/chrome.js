// Drawing everything around the conversation: the sessions list, the prompt panel, the pickers, the
// status line and the connection state. Each redraw waits for the next frame, so a burst of events
// draws once.

import {clear, compact, h} from './dom.js';
import {elicitationPrompt, permissionPrompt, questionPrompt, sessionList} from './panels.js';
import {$, app, currentAgent, currentModel, isBusy, root, timeline} from './state.js';
import {newSession, openSession} from './session.js';
import {replyElicitation, replyPermission, replyQuestion} from './actions.js';

let sessionsFrame = 0;
export function renderSessions() {
  if (!sessionsFrame) sessionsFrame = requestAnimationFrame(paintSessions);
}

export function paintSessions() {
  sessionsFrame = 0;
  sessionList($('sessions'), [...app.sessions.values()], app.statuses, app.convo?.id ?? null, {
    open: (id) => openSession(id),
    create: (directory) => newSession(directory),
  });
}

export function renderAsks() {
  const el = $('asks');
  clear(el);
  const permission = app.permissions[0];
  if (permission) {
    const reply = (kind, message) => replyPermission(permission, kind, message);
    el.appendChild(permissionPrompt(permission, app.permissions.length - 1, reply, askedCall(permission)));
  } else if (app.questions[0]) {
    const question = app.questions[0];
    el.appendChild(questionPrompt(question, (answers) => replyQuestion(question, answers), () => replyQuestion(question, null)));
  } else if (app.elicitations[0]) {
    const request = app.elicitations[0];
    el.appendChild(elicitationPrompt(request, (action, content) => replyElicitation(request, action, content)));
  }
  el.hidden = !el.firstChild;
  renderChrome();
}

/** What the call a permission is asked for works on, in full (its command, path or address). */
export function askedCall(request) {
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

let pickersShown = '';
export function renderPickers() {
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
export function renderChrome() {
  if (!chromeFrame) chromeFrame = requestAnimationFrame(paintChrome);
}

/** Recent sessions the home pane shows. */
const RECENT = 8;

/** With no session open: what to do, and the sessions working right now (the sidebar shows them too,
 * but a person looking at an empty pane should not have to find them). */
function paintHome() {
  const home = $('home');
  if (!home) return;
  home.hidden = Boolean(app.convo);
  if (app.convo) return;
  clear(home);
  home.appendChild(h('p', null, 'Type a message below to start a new session here, or open one from the list.'));
  const roots = [...app.sessions.values()].filter((s) => !s.parent_id);
  const busy = (s) => {
    const status = app.statuses.get(s.id);
    return Boolean(status && status.type !== 'idle');
  };
  const working = roots.filter(busy);
  if (working.length) {
    home.appendChild(h('p', {class: 'dim'}, 'Working now:'));
    home.appendChild(homeList('home-working', working, busy));
  }
  // The newest sessions of every project this server has, with where they live and how they are.
  const recent = roots
    .filter((s) => !busy(s))
    .sort((a, b) => (b.time?.updated ?? 0) - (a.time?.updated ?? 0))
    .slice(0, RECENT);
  if (recent.length) {
    home.appendChild(h('p', {class: 'dim'}, 'Recent:'));
    home.appendChild(homeList('home-recent', recent, busy));
  }
}


function homeList(cls, sessions, busy) {
  const list = h('ul', {class: cls});
  for (const session of sessions) {
    const open = h('button', {type: 'button', class: 'link', 'data-session': session.id}, session.title || session.id);
    open.addEventListener('click', () => openSession(session.id));
    const project = String(session.directory ?? '').replace(/\/+$/, '').split('/').pop() || session.directory || '';
    const state = busy(session) ? 'working' : session.revert ? 'undone turns' : 'idle';
    list.appendChild(h('li', null, busy(session) ? '● ' : '○ ', open, h('span', {class: 'dim'}, ` · ${project} · ${state}`)));
  }
  return list;
}

export function paintChrome() {
  chromeFrame = 0;
  paintHome();
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
  // A phone has no Ctrl or Esc, and room for a few words only.
  const small = matchMedia('(max-width: 760px), (pointer: coarse)').matches;
  $('input').placeholder = small
    ? busy ? 'Queue a message for after this run' : 'Message'
    : busy
      ? 'Enter queues a message for after this run · Ctrl+Enter steers it now · Esc stops'
      : 'Message (Enter sends, Shift+Enter new line)';
  const session = convo?.session;
  const model = currentModel();
  const entry = app.models.find((m) => m.id === model);
  const used = convo?.lastUsage();
  // Filled from the start: 0% of a known window before the first request; tokens when the window is unknown.
  const contextWindow = entry?.limit?.context;
  $('context').textContent = contextWindow ? `${Math.round((100 * (used ?? 0)) / contextWindow)}% context` : used ? `${compact(used)} tokens` : '';
  $('context').title = used ? `${used} tokens in the last request` : '';
  $('cost').textContent = `$${(session?.cost ?? 0).toFixed(4)}`;
  $('cost').title = session ? `${session.tokens?.input ?? 0} in · ${session.tokens?.output ?? 0} out` : '';
  $('queued').textContent = app.queued ? `${app.queued} queued` : '';
  $('session-id').textContent = convo?.id ?? '';
  for (const id of ['undo', 'redo', 'compact', 'export', 'jobs-toggle']) $(id).disabled = !convo;
  $('redo').disabled = !convo?.hiddenFrom();
  renderConnection();
}

export function renderConnection() {
  const el = $('conn');
  const text = {open: '', connecting: 'connecting…', retrying: 'reconnecting…', unauthorized: 'token needed'}[app.connection] ?? '';
  el.textContent = text;
  el.hidden = !text;
}

export function painted() {
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

export function closeSidebar() {
  document.body.classList.remove('sidebar-open');
}
