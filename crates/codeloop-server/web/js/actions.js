// What a person does: send (queue or steer), stop, answer a permission or a question, undo and redo,
// compact, export, and the jobs panel.

import {seg} from './api.js';
import {ellipsize} from './dom.js';
import {jobList} from './panels.js';
import {$, app, isBusy, notify, timeline} from './state.js';
import {newSession} from './session.js';
import {renderAsks, renderChrome} from './chrome.js';
import {commandFor, renderCommandList} from './commands.js';
import {asParts, restoreAttachments, takeAttachments} from './attach.js';

export async function send(delivery) {
  const input = $('input');
  const text = input.value;
  if (!text.trim() && !app.attachments.length) return;
  let convo = app.convo;
  if (!convo) {
    input.disabled = true;
    const session = await newSession(null);
    input.disabled = false;
    if (!session) return;
    convo = app.convo;
  }
  const busy = isBusy();
  const command = app.attachments.length ? null : commandFor(text);
  const files = command ? [] : takeAttachments();
  const body = command
    ? {command: command.name, arguments: command.arguments, delivery: busy ? delivery : 'queue'}
    : {parts: [...(text.trim() ? [{type: 'text', text}] : []), ...asParts(files)], delivery: busy ? delivery : 'queue'};
  if (app.model && !command) body.model = app.model;
  if (app.agent && !command) body.agent = app.agent;
  if (app.effort) body.effort = app.effort;
  input.value = '';
  autosize();
  renderCommandList();
  // Busy before the request, not after its answer: a quick run's own events (its end included) can
  // arrive before the 202 does, and must not be overwritten by a stale "busy".
  if (!busy) app.statuses.set(convo.id, {type: 'busy'});
  try {
    await app.api.post(`/session/${seg(convo.id)}/${command ? 'command' : 'prompt_async'}`, body);
    if (busy && delivery === 'queue') {
      app.queued += 1;
      notify('info', `Queued (sent when the run ends): ${ellipsize(text.split('\n')[0], 80)}`);
    } else if (busy) {
      notify('info', `Steering: ${ellipsize(text.split('\n')[0], 80)}`);
    }
    timeline.toBottom();
  } catch (e) {
    if (!busy) app.statuses.set(convo.id, {type: 'idle'});
    if (!input.value) input.value = text;
    restoreAttachments(files);
    notify('error', `Not sent: ${e.message}`);
  }
  renderChrome();
}

export async function abort() {
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

export async function replyPermission(request, reply, message) {
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

export async function replyQuestion(request, answers) {
  app.questions = app.questions.filter((r) => r.id !== request.id);
  renderAsks();
  try {
    if (answers) await app.api.post(`/question/${seg(request.id)}/reply`, {answers});
    else await app.api.post(`/question/${seg(request.id)}/reject`);
  } catch (e) {
    if (e.status !== 409) notify('error', `The answer was not taken: ${e.message}`);
  }
}

export async function replyElicitation(request, action, content) {
  app.elicitations = app.elicitations.filter((r) => r.id !== request.id);
  renderAsks();
  try {
    const body = content ? {action, content} : {action};
    await app.api.post(`/session/${seg(request.session_id)}/elicitation/${seg(request.id)}`, body);
  } catch (e) {
    // 404: answered elsewhere first, or the call ended.
    if (e.status !== 404) notify('error', `The answer was not taken: ${e.message}`);
  }
}

export async function undo() {
  const convo = app.convo;
  if (!convo) return;
  if (isBusy()) return notify('warn', 'A run is active: press Stop (or Esc) first, then Undo.');
  const message = convo.lastVisibleUser();
  if (!message) return notify('warn', 'Nothing to undo.');
  try {
    const session = await app.api.post(`/session/${seg(convo.id)}/revert`, {message_id: message});
    convo.session = session;
    notify('info', `Undone: the last turn and the files it changed${session.revert?.files?.length ? ` (${session.revert.files.join(', ')})` : ''}.`);
    // Calls that acted outside the project (DESIGN.md §5m): a revert cannot take those back; say which.
    const kept = session.revert?.not_undone ?? [];
    if (kept.length) {
      const names = kept.slice(0, 5).map((c) => `${c.tool}: ${c.title || c.call_id}`).join('; ');
      notify('warn', `Not undone — ${kept.length} call${kept.length === 1 ? '' : 's'} acted outside the project: ${names}${kept.length > 5 ? '; …' : ''}. Check ${kept.length === 1 ? 'it' : 'them'} yourself.`);
    }
  } catch (e) {
    notify('error', `Cannot undo: ${e.message}`);
  }
  renderChrome();
}

export async function redo() {
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

export async function compactNow() {
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

export async function exportSession() {
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

export async function loadJobs() {
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

export async function killJob(job) {
  const convo = app.convo;
  if (!convo) return;
  try {
    await app.api.post(`/session/${seg(convo.id)}/job/${seg(job)}/kill`);
  } catch (e) {
    notify('error', `Cannot kill ${job}: ${e.message}`);
  }
  loadJobs();
}

export function toggleJobs() {
  app.jobsOpen = !app.jobsOpen;
  $('jobs').hidden = !app.jobsOpen;
  $('jobs-toggle').setAttribute('aria-pressed', String(app.jobsOpen));
  if (app.jobsOpen) loadJobs();
}

export function needToken() {
  if (!$('login').hidden) return;
  app.feed?.stop();
  $('login').hidden = false;
  $('token').focus();
}

export function autosize() {
  const input = $('input');
  input.style.height = 'auto';
  input.style.height = `${Math.min(input.scrollHeight, Math.round(innerHeight * 0.4))}px`;
}
