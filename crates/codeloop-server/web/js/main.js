// The codeloop web page: the same sessions as the terminal UI, in a browser. A client of the documented
// API (GET /doc) and of GET /event, like any other; it holds no secret but the token it was opened with
// (`#token=…`, kept in this tab's session storage, sent only as `Authorization: Bearer`).

import {Api} from './api.js';
import {Feed} from './feed.js';
import {opened} from './parts.js';
import {$, RESUME_KEY, TOKEN_KEY, app, isBusy, routeSession, setRoute, timeline} from './state.js';
import {loadLists, openSession, saveResume, showEmpty} from './session.js';
import {onConnection, onControl, onEvent} from './events.js';
import {abort, autosize, compactNow, exportSession, redo, replyPermission, send, toggleJobs, undo} from './actions.js';
import {closeSidebar, renderChrome} from './chrome.js';
import {completeFirst, renderCommandList} from './commands.js';
import {attachFiles} from './attach.js';

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

// ----- boot -----

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

function wireUi() {
  const input = $('input');
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    send('queue');
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Tab' && !e.shiftKey && completeFirst()) {
      e.preventDefault();
      return;
    }
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send(e.ctrlKey || e.metaKey ? 'steer' : 'queue');
    }
  });
  $('attach').addEventListener('change', (e) => {
    attachFiles([...e.target.files]);
    e.target.value = '';
  });
  input.addEventListener('input', () => {
    autosize();
    renderCommandList();
  });
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
  $('effort').addEventListener('change', (e) => {
    app.effort = e.target.value || null;
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
