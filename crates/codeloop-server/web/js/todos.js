// The session's todo list (the model's `todowrite`), as a small panel above the composer: each item with
// its state, the one in progress marked; hidden while the list is empty.

import {clear, h} from './dom.js';
import {$, app} from './state.js';

const MARKS = {pending: '☐', in_progress: '◐', completed: '☑', cancelled: '✗'};

/** Bumped by every list set: a fetch answered after a newer `todo.updated` is stale. */
let generation = 0;

/** Loads the list of session `id` (when it opens). */
export async function loadTodos(id) {
  const asked = generation;
  try {
    const todos = await app.api.get(`/session/${encodeURIComponent(id)}/todo`);
    if (app.convo?.id === id && generation === asked) setTodos(todos);
  } catch {
    // The panel keeps what the event stream said.
  }
}

export function setTodos(todos) {
  generation += 1;
  app.todos = Array.isArray(todos) ? todos : [];
  renderTodos();
}

export function renderTodos() {
  const el = $('todos');
  if (!el) return;
  clear(el);
  const todos = app.todos ?? [];
  el.hidden = todos.length === 0;
  if (!todos.length) return;
  const done = todos.filter((t) => t.status === 'completed').length;
  el.appendChild(h('div', {class: 'panel-title'}, `Todo ${done}/${todos.length}`));
  const list = h('ul', {class: 'todos'});
  for (const todo of todos) {
    const status = todo.status ?? 'pending';
    list.appendChild(h('li', {class: `todo ${status}`, 'data-status': status}, `${MARKS[status] ?? '·'} `, todo.content ?? ''));
  }
  el.appendChild(list);
}
