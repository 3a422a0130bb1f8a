// One timeline row as DOM: a person's message, an answer's text (Markdown), reasoning (folded), a tool
// call as a card with its state, output and diff, and the page's own lines. Every text from the model,
// a tool or the server goes in as text (see dom.js and markdown.js).

import {compact, ellipsize, h} from './dom.js';
import {markdown} from './markdown.js';
import {highlight, languageOf} from './highlight.js';
import {errorMessage, isAborted, rowPart} from './convo.js';

/** Lines of output shown under a tool card before "show all". */
const PREVIEW_LINES = 6;
/** Lines of a diff shown before "show all". */
const DIFF_LINES = 16;
/** Longest output put in the document when expanded (the rest is cut with a note). */
const MAX_SHOWN = 200000;

/** Which foldable things a person opened (by row key), so a re-render keeps them open. */
export const opened = new Set();

/** The shown session's directory: changed files are named relative to it. */
let projectDir = null;
export function setProjectDir(directory) {
  projectDir = directory ? directory.replace(/\/+$/, '') : null;
}

function relative(path) {
  return projectDir && typeof path === 'string' && path.startsWith(`${projectDir}/`) ? path.slice(projectDir.length + 1) : path;
}

export function renderRow(row) {
  switch (row.kind) {
    case 'user':
      return userRow(row.entry);
    case 'part':
      return partRow(row);
    case 'summary':
      return summaryRow(row);
    case 'footer':
      return footerRow(row.entry);
    case 'notice':
      return h('div', {class: `notice ${row.item.level}`}, row.item.text);
    case 'undone':
      return h('div', {class: 'notice undone'}, `↶ ${row.count} ${row.count === 1 ? 'turn' : 'turns'} undone — Redo brings ${row.count === 1 ? 'it' : 'them'} back`);
    case 'older':
      return h('div', {class: 'edge'}, 'Loading older messages…');
    case 'start':
      return h('div', {class: 'edge'}, 'Start of the session');
    default:
      return h('div', {class: 'notice'}, '');
  }
}

function userRow(entry) {
  const body = [];
  for (const id of entry.order) {
    const part = entry.parts.get(id);
    if (!part) continue;
    if (part.type === 'text' && !part.synthetic && !part.ignored) body.push(h('div', {class: 'user-text'}, part.text));
    else if (part.type === 'file') body.push(h('div', {class: 'file'}, `📎 ${part.filename ?? part.mime}`));
    else if (part.type === 'compaction') {
      const why = part.overflow ? ' (the context was full)' : part.auto ? ' (automatic)' : '';
      body.push(h('div', {class: 'compaction'}, `⋯ compacting the conversation${why}`));
    }
  }
  const synthetic = body.length === 0;
  return h('div', {class: synthetic ? 'user synthetic' : 'user'}, synthetic ? h('div', {class: 'user-text'}, '(continue)') : body);
}

function partRow(row) {
  const part = rowPart(row);
  if (!part) return h('div', {class: 'line'}, '');
  switch (part.type) {
    case 'text':
      return h('div', {class: 'answer markdown'}, markdown(part.text));
    case 'reasoning':
      return fold(row.key, 'reasoning', `Thinking: ${firstLine(part.text)}`, () => h('div', {class: 'reasoning-text'}, part.text));
    case 'tool':
      return toolCard(row.key, part);
    case 'patch':
      return h('div', {class: 'line dim', title: (part.files ?? []).join('\n')}, `± files changed: ${(part.files ?? []).map(relative).join(', ')}`);
    case 'retry':
      return h('div', {class: 'line warn'}, `↻ attempt ${part.attempt} failed: ${errorMessage(part.error)}`);
    case 'subtask':
      return h('div', {class: 'line dim'}, `⤷ subtask (${part.agent}): ${part.description}`);
    case 'file':
      return h('div', {class: 'line dim'}, `📎 ${part.filename ?? part.mime}`);
    case 'compaction':
      return h('div', {class: 'line warn'}, '⋯ compacting the conversation');
    default:
      return h('div', {class: 'line dim'}, part.type);
  }
}

function summaryRow(row) {
  const parts = [...row.entry.parts.values()].filter((p) => p.type === 'text');
  const texts = parts.filter((p) => !p.metadata?.carried).map((p) => p.text).join('\n\n');
  const lines = texts ? texts.split('\n').length : 0;
  const summary = fold(row.key, 'summary', `Summary of the earlier conversation (${lines} lines)`, () => h('div', {class: 'markdown'}, markdown(texts)));
  const carried = parts.map(carriedLabel).filter(Boolean).map((label) => h('div', {class: 'line dim carried'}, `↳ ${label}`));
  return carried.length ? h('div', null, [summary, ...carried]) : summary;
}

/** What a compaction carried after its summary, in one line (as `TextPart::carried_label` says it). */
function carriedLabel(part) {
  const meta = part.metadata;
  if (meta?.carried === 'user_words') {
    const count = meta.count ?? 0;
    return `carried ${count} earlier user message${count === 1 ? '' : 's'} verbatim`;
  }
  if (meta?.carried === 'files') {
    const shown = meta.shown ?? [];
    const leftOut = meta.left_out ?? [];
    let label = `restored ${shown.length} file${shown.length === 1 ? '' : 's'}`;
    if (shown.length) label += `: ${shown.join(', ')}`;
    if (leftOut.length) label += `; named, not shown: ${leftOut.join('; ')}`;
    return label;
  }
  return null;
}

function footerRow(entry) {
  const info = entry.info;
  const out = [];
  if (info.error && isAborted(info.error)) out.push(h('div', {class: 'line warn'}, '■ interrupted'));
  else if (info.error) out.push(h('div', {class: 'line error'}, `✗ ${errorMessage(info.error)}`));
  if (info.time?.completed && info.finish !== 'tool-calls') {
    const t = info.tokens ?? {};
    const seconds = (info.time.completed - info.time.created) / 1000;
    const bits = [
      `${info.model?.provider_id ?? ''}/${info.model?.model_id ?? ''}`,
      info.agent,
      `${compact((t.input ?? 0) + (t.cache?.read ?? 0) + (t.cache?.write ?? 0))} in · ${compact(t.output ?? 0)} out`,
      `$${(info.cost ?? 0).toFixed(4)}`,
      `${seconds.toFixed(1)} s`,
    ];
    out.push(h('div', {class: 'meta'}, bits.filter(Boolean).join(' · ')));
  }
  return h('div', {class: 'footer'}, out);
}

/** A foldable block that builds its body only when opened. */
function fold(key, kind, title, body) {
  const details = h('details', {class: kind}, h('summary', null, title));
  const fill = () => {
    if (details.open && details.childNodes.length === 1) details.appendChild(body());
  };
  if (opened.has(key)) {
    details.open = true;
    fill();
  }
  details.addEventListener('toggle', () => {
    if (details.open) opened.add(key);
    else opened.delete(key);
    fill();
  });
  return details;
}

const STATES = {
  pending: ['○', 'pending'],
  running: ['◐', 'running'],
  completed: ['✓', 'completed'],
  error: ['✗', 'error'],
};

function toolCard(key, part) {
  const state = part.state ?? {status: 'pending'};
  const interrupted = state.status === 'error' && state.metadata?.interrupted === true;
  // Interrupted after it started: it may have acted (DESIGN.md §5m), shown apart from a failure.
  const unknown = interrupted && state.metadata?.outcome === 'unknown';
  const [icon, label] = interrupted ? ['■', unknown ? 'interrupted · may have acted' : 'interrupted'] : STATES[state.status] ?? ['?', state.status];
  // A command is what a person checks (its description is the model's own words): shown for bash.
  const command = part.tool === 'bash' && typeof state.input?.command === 'string' ? state.input.command : null;
  const title = command ?? (state.title && state.status !== 'pending' ? state.title : callSummary(part.tool, state.input ?? {}));
  const head = h(
    'div',
    {class: 'head'},
    h('span', {class: 'icon'}, icon),
    h('span', {class: 'tool-name'}, part.tool),
    h('span', {class: 'tool-input', title}, ellipsize(title, 160)),
    h('span', {class: 'badge'}, label),
  );
  const card = h('div', {class: `card tool ${interrupted ? 'interrupted' : state.status}`, 'data-tool': part.tool, 'data-state': interrupted ? 'interrupted' : state.status}, head);
  const body = toolBody(key, part, state, interrupted);
  if (body) card.appendChild(body);
  return card;
}

function toolBody(key, part, state, interrupted) {
  if (state.status === 'running') {
    const output = typeof state.metadata?.output === 'string' ? state.metadata.output : '';
    if (!output) return null;
    const lines = output.replace(/\n$/, '').split('\n');
    return h('pre', {class: 'output'}, lines.slice(-PREVIEW_LINES).join('\n'));
  }
  if (state.status === 'completed') {
    const diff = typeof state.metadata?.diff === 'string' ? state.metadata.diff : '';
    const family = languageOf(state.input?.filePath ?? state.input?.path);
    if (diff) {
      const block = diffBlock(key, diff, family);
      const found = diagnosticsBlock(state.metadata?.diagnostics);
      if (found) block.appendChild(found);
      return block;
    }
    if (state.time?.compacted) return h('pre', {class: 'output dim'}, '[output cleared for the model]');
    let output = state.output ?? '';
    if (part.tool === 'read') {
      output = output.split('\n').filter((l) => !l.startsWith('<')).join('\n');
      return outputBlock(key, output, 'output', family);
    }
    return outputBlock(key, output, 'output');
  }
  if (state.status === 'error') {
    if (interrupted) {
      const output = typeof state.metadata?.output === 'string' ? state.metadata.output : '';
      return output ? outputBlock(key, output, 'output') : null;
    }
    return outputBlock(key, state.error ?? '', 'output error');
  }
  return null;
}

/** The first lines of a text, with "show all" for the rest; `family` colours a file's lines (after the
 * line numbers read puts before them). */
function outputBlock(key, text, cls, family = null) {
  const lines = text.replace(/\n$/, '').split('\n');
  if (!text.trim()) return null;
  const wrap = h('div', {class: 'tool-body'});
  const full = opened.has(key);
  const shown = full ? lines : lines.slice(0, PREVIEW_LINES);
  const body = cut(shown.join('\n'));
  if (family && body.length === shown.join('\n').length) {
    const pre = h('pre', {class: cls});
    for (const line of shown) {
      // Only the file's own lines (they start with their number), not read's notes around them.
      const number = /^\s*\d+[|:\t] ?/.exec(line)?.[0];
      if (number === undefined) pre.append(line, '\n');
      else pre.append(number, ...highlight(line.slice(number.length), family), '\n');
    }
    wrap.appendChild(pre);
  } else {
    wrap.appendChild(h('pre', {class: cls}, body));
  }
  if (lines.length > PREVIEW_LINES) wrap.appendChild(toggle(key, full, lines.length - PREVIEW_LINES));
  return wrap;
}

function diffBlock(key, diff, family = null) {
  const lines = diff.replace(/\n+$/, '').split('\n').filter((l) => !/^(---|\+\+\+|Index:|====)/.test(l));
  const full = opened.has(key);
  const shown = full ? lines : lines.slice(0, DIFF_LINES);
  const pre = h('pre', {class: 'diff'});
  for (const line of shown) {
    const cls = line.startsWith('+') ? 'add' : line.startsWith('-') ? 'del' : line.startsWith('@') ? 'hunk' : 'ctx';
    const code = cls === 'add' || cls === 'del' || (cls === 'ctx' && line.startsWith(' '));
    const text = cut(line);
    pre.appendChild(
      code && family && text === line
        ? h('span', {class: cls}, line[0], highlight(line.slice(1), family), '\n')
        : h('span', {class: cls}, text + '\n'),
    );
  }
  const wrap = h('div', {class: 'tool-body'}, pre);
  if (lines.length > DIFF_LINES) wrap.appendChild(toggle(key, full, lines.length - DIFF_LINES));
  return wrap;
}

/** What the language servers said of an edit (DESIGN.md §5n), under its diff: one line per error. */
function diagnosticsBlock(found) {
  if (!Array.isArray(found) || found.length === 0) return null;
  const list = h('ul', {class: 'diagnostics'});
  for (const d of found.slice(0, 20)) {
    const where = `${d.path}:${d.line}:${d.column}`;
    list.appendChild(h('li', {class: `diagnostic ${d.severity === 'warning' ? 'warning' : 'error'}`}, h('span', {class: 'where'}, where), ` ${d.severity} ${ellipsize(String(d.message ?? ''), 200)}`));
  }
  if (found.length > 20) list.appendChild(h('li', {class: 'diagnostic dim'}, `… and ${found.length - 20} more`));
  return list;
}

/** "Show all" / "Show less": re-rendering the row is the timeline's job (the key changes version). */
function toggle(key, full, more) {
  const button = h('button', {type: 'button', class: 'link more', 'data-fold': key}, full ? 'Show less' : `Show ${more} more lines`);
  return button;
}

function cut(text) {
  return text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN)}\n… cut (${text.length - MAX_SHOWN} more characters)` : text;
}

function firstLine(text) {
  return ellipsize((text ?? '').split('\n').find((l) => l.trim()) ?? '', 120);
}

/** What a call works on, in a few words (as the terminal UI shows it). */
export function callSummary(tool, input) {
  const field = (name) => (typeof input?.[name] === 'string' ? input[name] : null);
  let text = null;
  switch (tool) {
    case 'bash':
      text = field('command');
      break;
    case 'read':
    case 'write':
    case 'edit':
      text = field('filePath') ?? field('file_path') ?? field('path');
      break;
    case 'grep':
    case 'glob':
      text = field('pattern');
      break;
    case 'skill':
      text = field('name');
      break;
    case 'todowrite':
      text = 'todo list';
      break;
    case 'webfetch':
      text = field('url');
      break;
    case 'task': {
      const d = field('description');
      const agent = field('subagent_type');
      text = d && agent ? `${agent}: ${d}` : d;
      break;
    }
    case 'apply_patch': {
      const patch = field('patchText') ?? field('patch_text');
      if (patch) {
        text = patch
          .split('\n')
          .map((l) => /^\*\*\* (?:Add|Update|Delete) File: (.*)$/.exec(l)?.[1]?.trim())
          .filter(Boolean)
          .join(', ');
      }
      break;
    }
    default:
      break;
  }
  if (text === null) {
    text = input && typeof input === 'object' ? Object.entries(input).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ') : String(input ?? '');
  }
  return ellipsize(text.split('\n')[0] ?? '', 100);
}
