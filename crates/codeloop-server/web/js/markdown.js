// A small Markdown renderer that builds DOM nodes: every piece of the model's text ends up in a text
// node (textContent), so markup in an answer — <script>, <img onerror>, anything — shows as the
// characters it is. Links are made only for http, https and mailto URLs; images are shown as links
// (the page loads nothing from another host). Covers what models write: headings, paragraphs,
// emphasis, code spans and fenced code, lists (nested), block quotes, tables, rules, links.
// An unfinished construct (a fence still streaming) renders as far as it goes.

import {h, link} from './dom.js';
import {highlight, languageOf} from './highlight.js';

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(?:[ \t]+(.*)|[ \t]*$)/;
const TABLE_RULE = /^ {0,3}\|?(?:[ \t]*:?-+:?[ \t]*\|)+(?:[ \t]*:?-+:?[ \t]*)?\|?[ \t]*$|^ {0,3}\|?[ \t]*:?-+:?[ \t]*\|?[ \t]*$/;

/** The Markdown `text` as a fragment of DOM nodes. */
export function markdown(text) {
  const fragment = document.createDocumentFragment();
  for (const node of blocks(String(text ?? '').replace(/\r\n?/g, '\n').split('\n'))) fragment.appendChild(node);
  return fragment;
}

function blocks(lines) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) {
      i += 1;
      continue;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const [, fence, lang] = m;
      const body = [];
      i += 1;
      while (i < lines.length && !isClosingFence(lines[i], fence)) body.push(lines[i++]);
      i += 1;
      out.push(codeBlock(body.join('\n'), lang));
      continue;
    }
    if ((m = HEADING.exec(line))) {
      out.push(h(`h${m[1].length}`, null, inline(m[2] ?? '')));
      i += 1;
      continue;
    }
    if (RULE.test(line)) {
      out.push(h('hr'));
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && lines[i].trim() && (QUOTE.test(lines[i]) || body.length)) {
        const q = QUOTE.exec(lines[i]);
        if (!q && startsBlock(lines[i])) break;
        body.push(q ? q[1] : lines[i]);
        i += 1;
      }
      out.push(h('blockquote', null, blocks(body)));
      continue;
    }
    if (ITEM.test(line)) {
      const [node, next] = list(lines, i);
      out.push(node);
      i = next;
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const [node, next] = table(lines, i);
      out.push(node);
      i = next;
      continue;
    }
    const para = [line];
    i += 1;
    while (i < lines.length && lines[i].trim() && !startsBlock(lines[i])) para.push(lines[i++]);
    out.push(h('p', null, inline(para.map((l) => l.replace(/^[ \t]+/, '')).join('\n'))));
  }
  return out;
}

function isClosingFence(line, fence) {
  const trimmed = line.trim();
  return trimmed.length >= fence.length && trimmed[0] === fence[0] && /^(`+|~+)$/.test(trimmed) && line.search(/\S/) <= 3;
}

/** Whether a line starts something that ends a paragraph. */
function startsBlock(line) {
  if (FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)) return true;
  const m = ITEM.exec(line);
  // An ordered item interrupts a paragraph only when it starts at 1 (as CommonMark says).
  return Boolean(m && m[3] && (/^[-*+]$/.test(m[2]) || /^1[.)]$/.test(m[2])));
}

function codeBlock(text, lang) {
  const code = h('code', lang ? {class: `language-${lang.replace(/[^\w#+.-]/g, '')}`} : null, highlight(text, languageOf(lang)));
  return h('pre', {class: 'code'}, code);
}

/** A list starting at `start`: its node and the index after it. */
function list(lines, start) {
  const first = ITEM.exec(lines[start]);
  const ordered = /\d/.test(first[2]);
  const marker = first[2].slice(-1);
  const node = ordered ? h('ol', Number.parseInt(first[2], 10) !== 1 ? {start: Number.parseInt(first[2], 10)} : null) : h('ul');
  let i = start;
  let loose = false;
  const items = [];
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || /\d/.test(m[2]) !== ordered || m[2].slice(-1) !== marker || m[1].length > first[1].length + 1) break;
    const indent = m[1].length + m[2].length + 1;
    const body = [m[3] ?? ''];
    i += 1;
    let blank = false;
    while (i < lines.length) {
      const line = lines[i];
      if (!line.trim()) {
        blank = true;
        body.push('');
        i += 1;
        continue;
      }
      const lead = line.search(/\S/);
      if (lead >= indent || (lead >= 2 && ITEM.test(line) && lead > m[1].length)) {
        body.push(line.slice(Math.min(lead, indent)));
        blank = false;
        i += 1;
        continue;
      }
      if (blank || ITEM.test(line) || startsBlock(line)) break;
      body.push(line.trim()); // a lazy continuation of the item's paragraph
      i += 1;
    }
    while (body.length && !body[body.length - 1].trim()) {
      body.pop();
      if (i < lines.length && ITEM.test(lines[i])) loose = true;
    }
    items.push(body);
  }
  for (const body of items) {
    const children = blocks(body);
    // A tight list shows its items' paragraphs without the paragraph spacing.
    const content = loose ? children : children.flatMap((child) => (child.tagName === 'P' ? [...child.childNodes] : [child]));
    const li = h('li', null, content);
    const task = li.firstChild?.nodeType === Node.TEXT_NODE ? /^\[([ xX])\] /.exec(li.firstChild.textContent) : null;
    if (task) {
      li.firstChild.textContent = li.firstChild.textContent.slice(4);
      li.prepend(h('span', {class: task[1] === ' ' ? 'task' : 'task done'}, task[1] === ' ' ? '☐ ' : '☑ '));
    }
    node.appendChild(li);
  }
  return [node, i];
}

function cells(line) {
  let text = line.trim();
  if (text.startsWith('|')) text = text.slice(1);
  if (text.endsWith('|') && !text.endsWith('\\|')) text = text.slice(0, -1);
  const out = [];
  let cell = '';
  for (let k = 0; k < text.length; k += 1) {
    if (text[k] === '\\' && text[k + 1] === '|') {
      cell += '|';
      k += 1;
    } else if (text[k] === '|') {
      out.push(cell.trim());
      cell = '';
    } else {
      cell += text[k];
    }
  }
  out.push(cell.trim());
  return out;
}

function table(lines, start) {
  const head = cells(lines[start]);
  const align = cells(lines[start + 1]).map((c) => (c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : null));
  const cell = (tag, text, k) => h(tag, align[k] ? {class: `align-${align[k]}`} : null, inline(text));
  const thead = h('thead', null, h('tr', null, head.map((c, k) => cell('th', c, k))));
  const tbody = h('tbody');
  let i = start + 2;
  while (i < lines.length && lines[i].trim() && lines[i].includes('|')) {
    const row = cells(lines[i]);
    tbody.appendChild(h('tr', null, head.map((_, k) => cell('td', row[k] ?? '', k))));
    i += 1;
  }
  return [h('div', {class: 'table'}, h('table', null, thead, tbody)), i];
}

const PUNCT = /[!-/:-@[-`{-~]/;
const URL_START = /^(https?:\/\/|mailto:)/i;

/** Inline Markdown as nodes. */
export function inline(text) {
  const out = [];
  let plain = '';
  const flush = () => {
    if (plain) out.push(document.createTextNode(plain));
    plain = '';
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === '\\' && i + 1 < text.length) {
      if (text[i + 1] === '\n') {
        flush();
        out.push(h('br'));
        i += 2;
        continue;
      }
      if (PUNCT.test(text[i + 1])) {
        plain += text[i + 1];
        i += 2;
        continue;
      }
    }
    if (c === '`') {
      const run = /^`+/.exec(text.slice(i))[0];
      const close = findRun(text, run, i + run.length);
      if (close >= 0) {
        flush();
        let code = text.slice(i + run.length, close).replace(/\n/g, ' ');
        if (/^ .*\S.* $/.test(code)) code = code.slice(1, -1);
        out.push(h('code', null, code));
        i = close + run.length;
        continue;
      }
      plain += run;
      i += run.length;
      continue;
    }
    if (c === '!' && text[i + 1] === '[') {
      const found = linkAt(text, i + 1);
      if (found) {
        flush();
        out.push(link(found.url, `🖼 ${found.label || 'image'}`));
        i = found.end;
        continue;
      }
    }
    if (c === '[') {
      const found = linkAt(text, i);
      if (found) {
        flush();
        out.push(link(found.url, inline(found.label)));
        i = found.end;
        continue;
      }
    }
    if (c === '<') {
      const m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(text.slice(i));
      if (m) {
        flush();
        out.push(link(m[1], m[1]));
        i += m[0].length;
        continue;
      }
    }
    if ((c === 'h' || c === 'H' || c === 'm' || c === 'M') && URL_START.test(text.slice(i, i + 8)) && (i === 0 || /[\s(]/.test(text[i - 1]))) {
      const m = /^(?:https?:\/\/|mailto:)[^\s<>]*[^\s<>.,;:!?)'"]/i.exec(text.slice(i));
      if (m) {
        flush();
        out.push(link(m[0], m[0]));
        i += m[0].length;
        continue;
      }
    }
    if (c === '*' || c === '_' || c === '~') {
      const found = emphasisAt(text, i);
      if (found) {
        flush();
        out.push(h(found.tag, null, inline(found.inner)));
        i = found.end;
        continue;
      }
      const run = new RegExp(`^\\${c}+`).exec(text.slice(i))[0];
      plain += run;
      i += run.length;
      continue;
    }
    if (c === '\n') {
      if (plain.endsWith('  ')) {
        plain = plain.replace(/ +$/, '');
        flush();
        out.push(h('br'));
      } else {
        plain += '\n';
      }
      i += 1;
      continue;
    }
    plain += c;
    i += 1;
  }
  flush();
  return out;
}

/** Index of the next backtick run exactly as long as `run`, from `from`. */
function findRun(text, run, from) {
  let k = text.indexOf(run, from);
  while (k >= 0) {
    const before = text[k - 1] === '`';
    const after = text[k + run.length] === '`';
    if (!before && !after) return k;
    k = text.indexOf(run, k + 1);
  }
  return -1;
}

/** `[label](url "title")` at `i`: label, url and the index after it; null when it is not a link. */
function linkAt(text, i) {
  let depth = 0;
  let k = i;
  for (; k < text.length; k += 1) {
    if (text[k] === '\\') {
      k += 1;
    } else if (text[k] === '[') {
      depth += 1;
    } else if (text[k] === ']') {
      depth -= 1;
      if (depth === 0) break;
    } else if (text[k] === '\n' && text[k + 1] === '\n') {
      return null;
    }
  }
  if (k >= text.length || text[k + 1] !== '(') return null;
  const m = /^\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+("[^"]*"|'[^']*'))?\s*\)/.exec(text.slice(k + 1));
  if (!m) return null;
  const url = m[1].startsWith('<') ? m[1].slice(1, -1) : m[1];
  return {label: text.slice(i + 1, k), url, end: k + 1 + m[0].length};
}

/** Emphasis, strong or strikethrough starting at `i`. */
function emphasisAt(text, i) {
  const c = text[i];
  const run = new RegExp(`^\\${c}+`).exec(text.slice(i))[0];
  const next = text[i + run.length];
  if (!next || /\s/.test(next)) return null;
  // `_` inside a word (snake_case) is not emphasis.
  if (c === '_' && i > 0 && /[\p{L}\p{N}]/u.test(text[i - 1])) return null;
  const tries = c === '~' ? (run.length === 2 ? [['~~', 'del']] : []) : run.length >= 3 ? [[c.repeat(2), 'strong'], [c, 'em']] : run.length === 2 ? [[c.repeat(2), 'strong']] : [[c, 'em']];
  for (const [delim, tag] of tries) {
    let k = text.indexOf(delim, i + delim.length + 1);
    while (k >= 0) {
      const prev = text[k - 1];
      const after = text[k + delim.length];
      const exact = delim.length === 2 || (text[k + 1] !== c && prev !== c);
      const wordAfter = c === '_' && after && /[\p{L}\p{N}]/u.test(after);
      const paragraphBreak = text.slice(i, k).includes('\n\n');
      if (paragraphBreak) break;
      if (!/\s/.test(prev) && exact && !wordAfter) {
        return {tag, inner: text.slice(i + delim.length, k), end: k + delim.length};
      }
      k = text.indexOf(delim, k + 1);
    }
  }
  return null;
}
