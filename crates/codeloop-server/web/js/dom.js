// Building DOM nodes safely: text goes in as text nodes (textContent), never as markup. Nothing in the
// page uses innerHTML; attributes are set one by one and event handler attributes are refused.

/** An element: `h('div', {class: 'row'}, 'text', child, [more])`. Strings become text nodes. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (/^on/i.test(name) || name === 'href' || name === 'src' || name === 'style') {
        throw new Error(`h(): set ${name} through a dedicated helper`);
      }
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Appends strings (as text), nodes and nested arrays; skips null, undefined and false. */
export function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
  return el;
}

/** Removes every child. */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

const SAFE_SCHEMES = new Set(['http:', 'https:', 'mailto:']);

/** The URL when it is safe to link to (http, https, mailto), else null. */
export function safeUrl(raw) {
  try {
    const url = new URL(String(raw).trim(), document.baseURI);
    return SAFE_SCHEMES.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

/** A link that opens in a new tab without handing the page over, or plain text when the URL is unsafe. */
export function link(raw, ...children) {
  const href = safeUrl(raw);
  if (!href) return h('span', {class: 'unsafe-link', title: String(raw)}, ...children);
  const a = h('a', {target: '_blank', rel: 'noopener noreferrer'}, ...children);
  a.href = href;
  return a;
}

/** First `max` characters, with an ellipsis when cut. */
export function ellipsize(text, max) {
  const s = String(text ?? '');
  return s.length > max ? s.slice(0, max - 1) + '…' : s;
}

/** `1234` → `1.2k`. */
export function compact(n) {
  if (!Number.isFinite(n)) return '–';
  if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (n >= 1e3) return (n / 1e3).toFixed(1) + 'k';
  return String(Math.round(n));
}
