// Syntax colour for code a person reads: fenced code blocks, read output and diffs. One small tokenizer
// per language family (comments, strings, numbers, keywords); everything goes in as text nodes, never
// markup. Unknown languages and long texts stay plain.

import {h} from './dom.js';

/** Longer texts are not highlighted (the page stays quick on a huge file). */
const MAX_CHARS = 60000;

const KEYWORDS = {
  c: 'auto break case char const continue default do double else enum extern float for goto if inline int long register return short signed sizeof static struct switch typedef union unsigned void volatile while class namespace template typename public private protected virtual new delete this true false nullptr bool using try catch throw',
  go: 'break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var true false nil',
  java: 'abstract boolean break byte case catch char class const continue default do double else enum extends final finally float for if implements import instanceof int interface long new package private protected public return short static super switch this throw throws try void while true false null var record',
  js: 'async await break case catch class const continue debugger default delete do else export extends false finally for from function if import in instanceof let new null of return static super switch this throw true try typeof undefined var void while yield interface type enum implements readonly as',
  py: 'and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return self True try while with yield match case',
  rs: 'as async await break const continue crate dyn else enum extern false fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while Some None Ok Err',
  sh: 'if then else elif fi for while do done case esac function in return local export echo exit set unset readonly shift',
  toml: 'true false',
};

/** The language family of a fence name or a file name. */
export function languageOf(name) {
  if (typeof name !== 'string' || !name) return null;
  const ext = name.toLowerCase().split(/[/.]/).pop();
  const families = {
    c: ['c', 'h', 'cc', 'cpp', 'cxx', 'hpp', 'hh', 'cs', 'csharp'],
    go: ['go', 'golang'],
    java: ['java', 'kt', 'kotlin', 'scala', 'swift'],
    js: ['js', 'jsx', 'mjs', 'cjs', 'ts', 'tsx', 'mts', 'cts', 'javascript', 'typescript', 'json', 'jsonc'],
    py: ['py', 'pyi', 'python'],
    rs: ['rs', 'rust'],
    sh: ['sh', 'bash', 'zsh', 'shell', 'console'],
    toml: ['toml', 'yaml', 'yml', 'ini', 'cfg'],
  };
  for (const [family, names] of Object.entries(families)) if (names.includes(ext)) return family;
  return null;
}

const compiled = new Map();

function tokenizer(family) {
  if (compiled.has(family)) return compiled.get(family);
  const hashComments = family === 'py' || family === 'sh' || family === 'toml';
  const comment = hashComments ? '#[^\\n]*' : '\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?(?:\\*\\/|$)';
  const strings = family === 'py'
    ? '"""[\\s\\S]*?(?:"""|$)|\'\'\'[\\s\\S]*?(?:\'\'\'|$)|"(?:\\\\.|[^"\\\\\\n])*"?|\'(?:\\\\.|[^\'\\\\\\n])*\'?'
    : family === 'rs'
      ? '"(?:\\\\.|[^"\\\\])*"?|\'(?:\\\\.|[^\'\\\\\\n]){1,2}\''
      : '"(?:\\\\.|[^"\\\\\\n])*"?|\'(?:\\\\.|[^\'\\\\\\n])*\'?|`(?:\\\\.|[^`\\\\])*`?';
  const words = (KEYWORDS[family] ?? '').split(' ').filter(Boolean).join('|');
  const source = `(${comment})|(${strings})|(\\b\\d[\\d_]*(?:\\.\\d+)?(?:[eE][+-]?\\d+)?[a-zA-Z_\\d]*\\b|\\b0[xX][\\da-fA-F_]+\\b)|${words ? `(\\b(?:${words})\\b)` : '(?!)'}`;
  const pattern = new RegExp(source, 'g');
  compiled.set(family, pattern);
  return pattern;
}

/** `text` as nodes: plain text and `span.tok-{com,str,num,kw}`. A null family gives the text alone. */
export function highlight(text, family) {
  if (!family || typeof text !== 'string' || text.length > MAX_CHARS) return [text];
  const pattern = tokenizer(family);
  pattern.lastIndex = 0;
  const out = [];
  let at = 0;
  for (let m = pattern.exec(text); m; m = pattern.exec(text)) {
    if (m[0] === '') {
      pattern.lastIndex += 1;
      continue;
    }
    if (m.index > at) out.push(text.slice(at, m.index));
    const cls = m[1] ? 'tok-com' : m[2] ? 'tok-str' : m[3] ? 'tok-num' : 'tok-kw';
    out.push(h('span', {class: cls}, m[0]));
    at = m.index + m[0].length;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}
