// Bus events as they arrive: applied to the open session, the lists and the prompts; job, limit and
// hook events (and types this page does not know) become lines.

import {errorMessage, isAborted} from './convo.js';
import {ellipsize} from './dom.js';
import {RING, RING_TYPES, addAsk, app, isBusy, mine, notify, timeline} from './state.js';
import {openSession, loadLists} from './session.js';
import {loadJobs, needToken} from './actions.js';
import {renderAsks, renderChrome, renderConnection, renderPickers, renderSessions} from './chrome.js';
import {setTodos} from './todos.js';

export function onControl(type) {
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

export function onConnection(state) {
  app.connection = state;
  if (state === 'unauthorized') needToken();
  renderConnection();
}

export function remember(event) {
  if (!RING_TYPES.has(event.type)) return;
  app.ring.push(event);
  if (app.ring.length > RING) app.ring.splice(0, app.ring.length - RING);
}

export function onEvent(event) {
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
      if (current) setTodos(p.todos ?? []);
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
    case 'elicitation.asked':
      addAsk(app.elicitations, p);
      renderAsks();
      break;
    case 'elicitation.replied':
      app.elicitations = app.elicitations.filter((r) => r.id !== p.request_id);
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
    case 'session.notice':
      if (current) notify('dim', `ℹ ${ellipsize(p.message ?? '', 600)}`);
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
