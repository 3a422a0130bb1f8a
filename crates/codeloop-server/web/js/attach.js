// Files attached to the next message: images, PDFs and text files picked with the paperclip, each at most
// MAX_FILE bytes and all together MAX_TOTAL (the server takes 10 MiB per request, base64 included). Images
// and PDFs go with the prompt as file parts; a text file as a text part with its name (every model reads
// text); the chips show them until they are sent.

import {clear, h} from './dom.js';
import {$, app, notify} from './state.js';

const MAX_FILE = 4 * 1024 * 1024;
const MAX_TOTAL = 6 * 1024 * 1024;
const TEXT_NAME = /\.(txt|md|json|ya?ml|toml|csv|log|rs|py|js|ts|tsx|jsx|go|java|c|h|cc|cpp|hpp|rb|sh|css|html|xml|sql)$/i;

/** The type a file is sent as, or null when it is none the models read. */
function mimeOf(file) {
  if (/^image\/(png|jpeg|gif|webp)$/.test(file.type) || file.type === 'application/pdf') return file.type;
  if (file.type.startsWith('text/') || file.type === 'application/json') return file.type;
  if (TEXT_NAME.test(file.name)) return 'text/plain';
  return null;
}

function read(file, mime) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    // A text file goes as its text (every model reads that); an image or a PDF as a data: URL.
    reader.onload = () =>
      resolve(text(mime) ? String(reader.result) : String(reader.result).replace(/^data:[^;,]*/, `data:${mime}`));
    reader.onerror = () => reject(reader.error);
    if (text(mime)) reader.readAsText(file);
    else reader.readAsDataURL(file);
  });
}

function text(mime) {
  return mime.startsWith('text/') || mime === 'application/json';
}

export async function attachFiles(files) {
  for (const file of files) {
    const mime = mimeOf(file);
    const total = app.attachments.reduce((sum, a) => sum + a.size, 0);
    if (!mime) {
      notify('warn', `${file.name}: not attached — images (PNG, JPEG, GIF, WebP), PDFs and text files only.`);
    } else if (file.size > MAX_FILE) {
      notify('warn', `${file.name}: not attached — ${Math.ceil(file.size / 1024)} KiB is over the ${MAX_FILE / 1024 / 1024} MiB a file may be.`);
    } else if (total + file.size > MAX_TOTAL) {
      notify('warn', `${file.name}: not attached — the message's files would pass ${MAX_TOTAL / 1024 / 1024} MiB.`);
    } else {
      try {
        app.attachments.push({filename: file.name, mime, size: file.size, url: await read(file, mime)});
      } catch (e) {
        notify('error', `${file.name}: could not be read (${e?.message ?? e}).`);
      }
    }
  }
  renderAttachments();
}

/** Takes the attachments for the message being sent (they are forgotten here). */
export function takeAttachments() {
  const taken = app.attachments;
  app.attachments = [];
  renderAttachments();
  return taken;
}

/** Puts back what a failed send took. */
export function restoreAttachments(taken) {
  app.attachments.push(...taken);
  renderAttachments();
}

/** Attachments as the prompt's parts. */
export function asParts(taken) {
  return taken.map((a) =>
    text(a.mime)
      ? {type: 'text', text: `${a.filename}:\n\`\`\`\n${a.url.replace(/\n$/, '')}\n\`\`\``}
      : {type: 'file', mime: a.mime, url: a.url, filename: a.filename},
  );
}

export function renderAttachments() {
  const el = $('attachments');
  if (!el) return;
  clear(el);
  el.hidden = app.attachments.length === 0;
  app.attachments.forEach((a, i) => {
    const remove = h('button', {type: 'button', class: 'icon-button', 'aria-label': `Remove ${a.filename}`}, '×');
    remove.addEventListener('click', () => {
      app.attachments.splice(i, 1);
      renderAttachments();
    });
    el.appendChild(h('span', {class: 'chip', 'data-file': a.filename}, `📎 ${a.filename}`, remove));
  });
}
