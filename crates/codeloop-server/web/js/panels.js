// The page's panels besides the timeline: the sessions list (by directory), a permission prompt, a
// question, and the jobs list. Each is built from data with callbacks for what a person does.

import {clear, ellipsize, h, link} from './dom.js';

/** Sessions grouped by directory, newest first; `current` is highlighted. */
export function sessionList(el, sessions, statuses, current, {open, create}) {
  clear(el);
  const groups = new Map();
  for (const session of sessions) {
    if (session.parent_id) continue;
    if (!groups.has(session.directory)) groups.set(session.directory, []);
    groups.get(session.directory).push(session);
  }
  const ordered = [...groups.entries()].sort((a, b) => newest(b[1]) - newest(a[1]));
  if (!ordered.length) el.appendChild(h('p', {class: 'empty'}, 'No sessions yet: write a message to start one.'));
  for (const [directory, list] of ordered) {
    list.sort((a, b) => b.time.updated - a.time.updated);
    const add = h('button', {type: 'button', class: 'icon-button', title: `New session in ${directory}`, 'aria-label': `New session in ${directory}`}, '+');
    add.addEventListener('click', () => create(directory));
    const items = h('ul');
    for (const session of list) {
      const status = statuses.get(session.id);
      const busy = status && status.type !== 'idle';
      const button = h(
        'button',
        {type: 'button', class: session.id === current ? 'session current' : 'session', 'data-session': session.id, title: session.title},
        h('span', {class: busy ? 'dot busy' : 'dot'}, busy ? '●' : ''),
        h('span', {class: 'session-title'}, ellipsize(session.title, 80)),
        h('time', null, ago(session.time.updated)),
      );
      button.addEventListener('click', () => open(session.id));
      items.appendChild(h('li', null, button));
    }
    el.appendChild(h('section', {class: 'group'}, h('h2', {title: directory}, h('span', {class: 'dir'}, shortDir(directory)), add), items));
  }
}

function newest(list) {
  return Math.max(...list.map((s) => s.time.updated));
}

function shortDir(directory) {
  const parts = directory.split('/').filter(Boolean);
  return parts.length > 2 ? `…/${parts.slice(-2).join('/')}` : directory;
}

/** "3 min ago"-style time. */
export function ago(ms) {
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return 'now';
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return new Date(ms).toISOString().slice(0, 10);
}

/** A permission request with the three answers (and an optional message sent with Reject). */
export function permissionPrompt(request, more, reply, call) {
  const note = h('input', {type: 'text', class: 'reject-note', placeholder: 'Why not? (optional, sent to the model with Reject)', 'aria-label': 'Message sent with Reject'});
  const button = (label, kind, cls) => {
    const b = h('button', {type: 'button', class: cls, 'data-reply': kind}, label);
    b.addEventListener('click', () => reply(kind, kind === 'reject' ? note.value.trim() || null : null));
    return b;
  };
  const patterns = (request.patterns ?? []).join(', ');
  const meta = request.metadata ?? {};
  const sampling = typeof meta.request === 'string' ? `MCP server ${meta.server} asks the model: ${meta.request}` : null;
  const detail = sampling ?? call ?? (typeof meta.command === 'string' ? meta.command : typeof meta.filePath === 'string' ? meta.filePath : patterns);
  return h(
    'div',
    {class: 'ask permission', role: 'alertdialog', 'aria-label': 'Permission request'},
    h('div', {class: 'ask-title'}, `Permission: ${request.permission}`, more ? h('span', {class: 'more-asks'}, ` (+${more} more waiting)`) : null),
    h('pre', {class: 'ask-detail'}, detail),
    patterns && patterns !== detail ? h('div', {class: 'dim'}, `patterns: ${patterns}`) : null,
    (request.always ?? []).length ? h('div', {class: 'dim'}, `Always approves: ${request.always.join(', ')}`) : null,
    h('div', {class: 'ask-actions'}, button('Allow once', 'once', 'primary'), button('Always', 'always', ''), button('Reject', 'reject', 'danger'), note),
  );
}

/** A question from the question tool: options (one or several) and a free answer per question. */
export function questionPrompt(request, answer, decline) {
  const fields = [];
  const form = h('form', {class: 'ask question', 'aria-label': 'Question'});
  request.questions.forEach((question, index) => {
    const name = `q${index}`;
    const options = (question.options ?? []).map((option) => {
      const input = h('input', {type: question.multiple ? 'checkbox' : 'radio', name, value: option.label});
      return h('label', {class: 'option'}, input, ' ', option.label, option.description ? h('span', {class: 'dim'}, ` — ${option.description}`) : null);
    });
    const free = h('input', {type: 'text', name: `${name}-free`, placeholder: 'Or type an answer', 'aria-label': 'Your answer'});
    fields.push({name, free});
    form.appendChild(h('fieldset', null, h('legend', null, question.header ? `${question.header}: ` : '', question.question), options, free));
  });
  const send = h('button', {type: 'submit', class: 'primary'}, 'Answer');
  const no = h('button', {type: 'button', class: 'danger'}, 'Decline');
  no.addEventListener('click', () => decline());
  form.appendChild(h('div', {class: 'ask-actions'}, send, no));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const answers = fields.map(({name, free}) => {
      const chosen = [...form.querySelectorAll(`input[name="${name}"]:checked`)].map((i) => i.value);
      if (free.value.trim()) chosen.push(free.value.trim());
      return chosen;
    });
    answer(answers);
  });
  return form;
}

/**
 * An MCP server's request for input: a form of the schema's primitive fields, or a URL to visit (shown as a
 * link, never opened by the page). Fields left empty are left out: the server's defaults apply.
 */
export function elicitationPrompt(request, answer) {
  const form = h('form', {class: 'ask elicitation', 'aria-label': `Request from MCP server ${request.server}`});
  form.appendChild(h('div', {class: 'ask-title'}, `MCP server ${request.server} asks`));
  form.appendChild(h('p', null, request.message));
  const inputs = [];
  if (request.mode === 'url' && request.url) {
    form.appendChild(h('p', null, link(request.url, request.url)));
  }
  for (const [name, spec] of Object.entries(request.schema?.properties ?? {})) {
    const label = spec.title ?? name;
    let input;
    if (Array.isArray(spec.enum)) {
      input = h('select', {name}, h('option', {value: ''}, '—'), ...spec.enum.map((v) => h('option', {value: String(v)}, String(v))));
    } else if (spec.type === 'boolean') {
      input = h('input', {type: 'checkbox', name});
      if (spec.default === true) input.checked = true;
    } else {
      const type = spec.type === 'integer' || spec.type === 'number' ? 'number' : 'text';
      input = h('input', {type, name, placeholder: spec.default !== undefined ? String(spec.default) : ''});
    }
    inputs.push({name, spec, input});
    form.appendChild(h('label', {class: 'field'}, label, spec.description ? h('span', {class: 'dim'}, ` — ${spec.description}`) : null, ' ', input));
  }
  const button = (text, action, cls) => {
    const b = h('button', {type: action === 'accept' ? 'submit' : 'button', class: cls}, text);
    if (action !== 'accept') b.addEventListener('click', () => answer(action, null));
    return b;
  };
  form.appendChild(h('div', {class: 'ask-actions'}, button(request.mode === 'url' ? 'Done' : 'Send', 'accept', 'primary'), button('Decline', 'decline', 'danger'), button('Cancel', 'cancel', '')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    if (request.mode === 'url') return answer('accept', null);
    const content = {};
    for (const {name, spec, input} of inputs) {
      if (spec.type === 'boolean') content[name] = input.checked;
      else if (input.value === '') continue;
      else if (spec.type === 'integer' || spec.type === 'number') content[name] = Number(input.value);
      else content[name] = input.value;
    }
    answer('accept', content);
  });
  return form;
}

/** The session's background jobs with a Kill button for running ones. */
export function jobList(el, jobs, {kill, close}, note) {
  clear(el);
  const shut = h('button', {type: 'button', class: 'icon-button', 'aria-label': 'Close jobs'}, '×');
  shut.addEventListener('click', close);
  el.appendChild(h('div', {class: 'panel-title'}, 'Jobs', shut));
  if (note) el.appendChild(h('p', {class: 'dim'}, note));
  else if (!jobs.length) el.appendChild(h('p', {class: 'dim'}, 'No background jobs in this session.'));
  const list = h('ul', {class: 'jobs'});
  for (const job of jobs) {
    const state = job.state ?? 'running';
    const code = job.exit_code !== undefined && job.exit_code !== null ? ` (exit ${job.exit_code})` : '';
    const row = h('li', {'data-job': job.id}, h('code', null, job.id), ' ', h('span', {class: `badge ${state}`}, state + code), ' ', h('span', {class: 'job-command'}, ellipsize(job.command ?? '', 200)));
    if (state === 'running') {
      const b = h('button', {type: 'button', class: 'danger small'}, 'Kill');
      b.addEventListener('click', () => kill(job.id));
      row.appendChild(b);
    }
    list.appendChild(row);
  }
  el.appendChild(list);
}
