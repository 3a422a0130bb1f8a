// Slash commands in the composer: `/NAME args` runs a command (a Markdown command file, an MCP prompt,
// init or compact) through POST /session/:id/command, as the TUI and `run --command` do; typing `/` lists
// the commands of the session's project, Tab or a click completes one.

import {clear, h} from './dom.js';
import {$, app} from './state.js';

/** The commands of `directory` (the server's own when null), for the list and for sending. */
export async function loadCommands(directory) {
  const query = directory ? `?directory=${encodeURIComponent(directory)}` : '';
  try {
    app.commands = await app.api.get(`/command${query}`);
  } catch {
    app.commands = [];
  }
  renderCommandList();
}

/** `{name, arguments}` when `text` is a known command typed as `/NAME args`, else null (a path like
 * `/etc/hosts …` is just text). */
export function commandFor(text) {
  const match = /^\/([\w:.-]+)(?:\s+([\s\S]*))?$/.exec(text.trim());
  if (!match || !app.commands.some((c) => c.name === match[1])) return null;
  return {name: match[1], arguments: (match[2] ?? '').trim()};
}

/** The commands the typed `/prefix` matches (none once the name is followed by a space). */
function matching() {
  const text = $('input').value;
  const match = /^\/([\w:.-]*)$/.exec(text);
  if (!match) return [];
  return app.commands.filter((c) => c.name.startsWith(match[1])).slice(0, 8);
}

export function renderCommandList() {
  const list = $('command-list');
  if (!list) return;
  clear(list);
  const found = matching();
  for (const command of found) {
    const item = h(
      'li',
      {role: 'option', 'data-command': command.name},
      h('span', {class: 'command-name'}, `/${command.name}`),
      command.argument_hint ? h('span', {class: 'dim'}, ` ${command.argument_hint}`) : null,
      command.description ? h('span', {class: 'dim'}, ` — ${command.description}`) : null,
    );
    item.addEventListener('mousedown', (e) => {
      e.preventDefault();
      complete(command.name);
    });
    list.appendChild(item);
  }
  list.hidden = found.length === 0;
}

function complete(name) {
  const input = $('input');
  input.value = `/${name} `;
  input.focus();
  renderCommandList();
}

/** Tab completes the first match while the list shows; true when it did. */
export function completeFirst() {
  const found = matching();
  if (!found.length) return false;
  complete(found[0].name);
  return true;
}
