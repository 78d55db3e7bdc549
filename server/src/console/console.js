// The toolbox console: sessions, turns, live events, approvals, trajectory replay.
// Plain JS, no build step. Everything the model or a tool wrote is put on the page as text
// (textContent, Text nodes), never parsed as HTML: tool output is hostile.
'use strict';

const $ = (sel) => document.querySelector(sel);
const enc = encodeURIComponent;
const SESSION_ID = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;
const TOKEN_KEY = 'toolbox.token';
const REPLAY_PAGE = 50;
const MAX_OUTPUT = 100000; // characters of streamed output kept per call
const TITLE = 'toolbox console';
const FOLD_LINES = 14; // a preview longer than this folds, so the buttons stay in sight
const FOLD_CHARS = 1500;
const MAX_BLOCKS = 50; // preview blocks shown per approval
const DECISIONS = [
  ['approve', 'Approve', 'approved'],
  ['deny', 'Deny', 'denied'],
  ['approve_for_session', 'Approve for session', 'approved for this session'],
];
// A review (of a goal or a plan) is approved or rejected, with feedback for the model.
const REVIEW_DECISIONS = [
  ['approve', 'Approve', 'approved'],
  ['reject', 'Reject', 'rejected'],
];

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  sid: null,
  stream: null,
  calls: new Map(), // call id -> the card's parts
  approvals: new Map(), // call id -> approval card, in the order they were asked
  errors: new Map(), // turn id -> the error texts shown for it
  finished: new Set(), // the turns of the open session seen to end
  sessions: new Map(), // session id -> its row in the session list (from the live feed)
  feed: null,
  lastText: null, // {key, node}: where the next text_delta of the same agent goes
  replay: { index: 0, total: 0, pages: new Map() },
  view: 'live',
  turnModes: new Map(), // turn id -> its permission mode (from turn_started)
  readTools: null, // the names of the tools that never ask (GET /api/tools?mode=read_only)
  liveQuestion: null, // the approval or review card whose buttons are live
  planSeen: {}, // part -> its review as last drawn, to say what changed
};
// Below this width the page is one column (the same width as console.css's @media).
const NARROW = window.matchMedia('(max-width: 700px)');

/** An element with a class and text (as text, never HTML). */
function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function show(node, text) {
  node.textContent = text || '';
  node.hidden = !text;
}

/** JSON sent as text, parsed; anything else as it is. */
function parsed(value) {
  if (typeof value !== 'string' || !/^\s*[[{]/.test(value)) return value;
  try {
    return JSON.parse(value);
  } catch (_) {
    return value;
  }
}

function scalarText(value) {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return value === '' ? '""' : value;
  if (Array.isArray(value)) return '[]';
  if (typeof value === 'object') return '{}';
  return String(value);
}

function isFilled(value) {
  return value !== null && typeof value === 'object' && Object.keys(value).length > 0;
}

/** A string's lines, without the empty one after a final newline. */
function linesOf(text) {
  const lines = text.split('\n');
  if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

function valueLines(value, pad, out) {
  if (Array.isArray(value)) {
    for (const item of value) {
      if (isFilled(item)) {
        out.push(pad + '-');
        valueLines(item, pad + '  ', out);
      } else if (typeof item === 'string' && item.includes('\n')) {
        out.push(pad + '-');
        for (const line of linesOf(item)) out.push(pad + '  ' + line);
      } else {
        out.push(pad + '- ' + scalarText(item));
      }
    }
    return;
  }
  for (const key of Object.keys(value)) {
    const item = value[key];
    if (isFilled(item)) {
      out.push(pad + key + ':');
      valueLines(item, pad + '  ', out);
    } else if (typeof item === 'string' && item.includes('\n')) {
      out.push(pad + key + ':');
      for (const line of linesOf(item)) out.push(pad + '  ' + line);
    } else {
      out.push(pad + key + ': ' + scalarText(item));
    }
  }
}

/**
 * Arguments and other JSON as indented `key: value` lines, never escaped JSON: a string
 * with newlines shows as its lines (indented under its key). JSON sent as text is parsed
 * first; other text is shown as it is.
 */
function keyValueText(value) {
  value = parsed(value);
  if (typeof value === 'string') return value;
  if (!isFilled(value)) return scalarText(value);
  const out = [];
  valueLines(value, '', out);
  return out.join('\n');
}

/** "12 ms", "3.4 s", "2 min 5 s". */
function duration(ms) {
  ms = Math.max(0, Number(ms) || 0);
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  const s = Math.round(ms / 1000);
  return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
}

/** How long a call took, and apart from that how long it waited for a person. */
function timing(ev) {
  const waited = Number(ev.waited_ms) || 0;
  return duration(ev.elapsed_ms) + (waited > 0 ? ' · waited ' + duration(waited) + ' for approval' : '');
}

// ---- Markdown: the model's text, built as DOM nodes (no HTML is ever parsed) ----

const ESCAPABLE = '\\`*_{}[]()#+-.!~<>|"\'';
const MAX_NESTING = 8;

/** An http(s) address as the link's href, or null (javascript:, data:, relative: none). */
function safeHref(raw) {
  try {
    const url = new URL(raw);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
  } catch (_) {
    return null;
  }
}

function link(href, parent) {
  const a = document.createElement('a');
  a.href = href;
  a.rel = 'noopener noreferrer';
  a.target = '_blank';
  parent.append(a);
  return a;
}

/** Where the closing `delim` of an emphasis opened at `from` is, or -1. */
function closingDelimiter(text, delim, from) {
  let j = from;
  for (;;) {
    j = text.indexOf(delim, j);
    if (j < 0) return -1;
    const single = delim.length === 1;
    if (single && text[j + 1] === delim) { // part of a double run: not ours
      j += 2;
      continue;
    }
    if (j > from && !/\s/.test(text[j - 1])
      && !(delim[0] === '_' && /[A-Za-z0-9]/.test(text[j + delim.length] || ''))) return j;
    j += delim.length;
  }
}

/** Inline Markdown of `text` appended to `parent`: code, emphasis, links, escapes. */
function inline(text, parent, depth) {
  let plain = '';
  const flush = () => {
    if (plain) parent.append(document.createTextNode(plain));
    plain = '';
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const rest = text.slice(i);
    if (c === '\\' && i + 1 < text.length && ESCAPABLE.includes(text[i + 1])) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (c === '`') {
      const run = /^`+/.exec(rest)[0];
      let end = -1;
      for (let j = i + run.length; (j = text.indexOf(run, j)) >= 0; j += run.length) {
        if (text[j + run.length] !== '`' && text[j - 1] !== '`') {
          end = j;
          break;
        }
        while (text[j + run.length] === '`') j++;
      }
      if (end < 0) {
        plain += run;
        i += run.length;
        continue;
      }
      let code = text.slice(i + run.length, end).replace(/\n/g, ' ');
      if (code.length > 2 && code.startsWith(' ') && code.endsWith(' ')) code = code.slice(1, -1);
      flush();
      parent.append(el('code', '', code));
      i = end + run.length;
      continue;
    }
    if ((c === '*' || c === '_' || c === '~') && depth < MAX_NESTING) {
      const double = text[i + 1] === c;
      const delim = double ? c + c : c;
      const opensWord = !(c === '_' && /[A-Za-z0-9]/.test(text[i - 1] || ''));
      const next = text[i + delim.length] || '';
      if ((c !== '~' || double) && opensWord && next && !/\s/.test(next)) {
        const end = closingDelimiter(text, delim, i + delim.length);
        if (end > i + delim.length) {
          flush();
          const tag = c === '~' ? 'del' : double ? 'strong' : 'em';
          const node = document.createElement(tag);
          inline(text.slice(i + delim.length, end), node, depth + 1);
          parent.append(node);
          i = end + delim.length;
          continue;
        }
      }
      plain += delim;
      i += delim.length;
      continue;
    }
    if (c === '[' && depth < MAX_NESTING) {
      const m = /^\[([^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*)\]\(\s*<?([^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*)>?(?:\s+"[^"]*")?\s*\)/.exec(rest);
      if (m) {
        flush();
        const href = safeHref(m[2]);
        if (href) inline(m[1], link(href, parent), depth + 1);
        else inline(m[1] + ' (' + m[2] + ')', parent, depth + 1); // not http(s): text only
        i += m[0].length;
        continue;
      }
    }
    if (c === '<') {
      const m = /^<(https?:\/\/[^\s<>]+)>/.exec(rest);
      const href = m && safeHref(m[1]);
      if (href) {
        flush();
        link(href, parent).textContent = m[1];
        i += m[0].length;
        continue;
      }
    }
    if (c === 'h' && !/[A-Za-z0-9]/.test(text[i - 1] || '')) {
      const m = /^https?:\/\/[^\s<>"'`]+/.exec(rest);
      if (m) {
        const address = m[0].replace(/[.,;:!?)\]]+$/, '');
        const href = safeHref(address);
        if (href) {
          flush();
          link(href, parent).textContent = address;
          i += address.length;
          continue;
        }
      }
    }
    plain += c;
    i++;
  }
  flush();
}

/** A paragraph's lines, with a line break between them. */
function paragraph(lines, parent) {
  const p = document.createElement('p');
  lines.forEach((line, n) => {
    if (n) p.append(document.createElement('br'));
    inline(line.trim(), p, 0);
  });
  parent.append(p);
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const TABLE_DELIMITER = /^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$/;
const MAX_COLUMNS = 64;

/**
 * A table row's cells, as GitHub splits them: on every pipe not escaped as `\|` (which
 * stays in the cell as a pipe), without the outer pipes; each cell trimmed.
 */
function tableCells(line) {
  let text = line.trim();
  if (text.startsWith('|')) text = text.slice(1);
  if (text.endsWith('|') && !text.endsWith('\\|')) text = text.slice(0, -1);
  const cells = [];
  let cell = '';
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '\\' && text[i + 1] === '|') {
      cell += '|';
      i++;
    } else if (text[i] === '|') {
      cells.push(cell.trim());
      cell = '';
    } else {
      cell += text[i];
    }
  }
  cells.push(cell.trim());
  return cells;
}

/** Whether `lines[i]` starts a pipe table: a header row, then a delimiter row as wide. */
function tableAt(lines, i) {
  const head = lines[i];
  const delimiter = lines[i + 1];
  if (delimiter === undefined || !head.includes('|') || !delimiter.includes('|')
    || !TABLE_DELIMITER.test(delimiter)) return false;
  const width = tableCells(head).length;
  return width <= MAX_COLUMNS && width === tableCells(delimiter).length;
}

/** A cell's alignment class from its delimiter: `:--` left, `:-:` center, `--:` right. */
function alignment(delimiter) {
  const left = delimiter.startsWith(':');
  const right = delimiter.endsWith(':');
  if (left && right) return 'align-center';
  if (right) return 'align-right';
  return left ? 'align-left' : '';
}

/**
 * A pipe table starting at `lines[start]` (see tableAt), in a box of its own that scrolls
 * sideways when it is wider than the log; returns the index after it. It ends at a blank
 * line or a line without a pipe. Every cell is inline Markdown, put in as text.
 */
function table(lines, start, parent) {
  const head = tableCells(lines[start]);
  const aligns = tableCells(lines[start + 1]).map(alignment);
  const row = (cells, tag) => {
    const tr = document.createElement('tr');
    aligns.forEach((align, n) => {
      const cell = document.createElement(tag);
      if (align) cell.className = align;
      inline(cells[n] || '', cell, 0);
      tr.append(cell);
    });
    return tr;
  };
  const node = document.createElement('table');
  const thead = document.createElement('thead');
  thead.append(row(head, 'th'));
  node.append(thead);
  const tbody = document.createElement('tbody');
  let i = start + 2;
  while (i < lines.length && lines[i].trim() !== '' && lines[i].includes('|')) {
    tbody.append(row(tableCells(lines[i]), 'td'));
    i++;
  }
  if (tbody.children.length) node.append(tbody);
  const box = el('div', 'md-table');
  box.append(node);
  parent.append(box);
  return i;
}

/** A list starting at `lines[start]`; returns the index after it. */
function list(lines, start, parent, depth) {
  const first = ITEM.exec(lines[start]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const node = document.createElement(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  let item = null;
  let text = [];
  const close = () => {
    if (item && text.length) paragraphInto(text, item);
    text = [];
  };
  let i = start;
  while (i < lines.length) {
    const line = lines[i];
    const m = ITEM.exec(line);
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      close();
      item = document.createElement('li');
      node.append(item);
      text = [m[3]];
      i++;
      continue;
    }
    if (m && m[1].length > indent && depth < MAX_NESTING) {
      close();
      i = list(lines, i, item, depth + 1);
      continue;
    }
    if (line.trim() !== '' && !m && /^\s+/.test(line) && !FENCE.test(line)) {
      text.push(line);
      i++;
      continue;
    }
    if (line.trim() !== '' && !m && text.length && !HEADING.test(line) && !QUOTE.test(line)
      && !FENCE.test(line) && !RULE.test(line)) {
      text.push(line); // a lazy continuation of the item's text
      i++;
      continue;
    }
    break;
  }
  close();
  parent.append(node);
  return i;
}

function paragraphInto(lines, parent) {
  lines.forEach((line, n) => {
    if (n) parent.append(document.createElement('br'));
    inline(line.trim(), parent, 0);
  });
}

/** Block Markdown of `lines` appended to `parent`. */
function blocks(lines, parent, depth) {
  let para = [];
  const flush = () => {
    if (para.length) paragraph(para, parent);
    para = [];
  };
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flush();
      const mark = fence[1];
      const body = [];
      i++;
      while (i < lines.length) {
        const close = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(lines[i]);
        if (close && close[1][0] === mark[0] && close[1].length >= mark.length) {
          i++;
          break;
        }
        body.push(lines[i]);
        i++;
      }
      const pre = el('pre', 'md-code');
      const code = el('code', '', body.join('\n'));
      if (/^[A-Za-z0-9_+-]{1,32}$/.test(fence[2])) code.dataset.lang = fence[2];
      pre.append(code);
      parent.append(pre);
      continue;
    }
    if (line.trim() === '') {
      flush();
      i++;
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      flush();
      const h = document.createElement('h' + heading[1].length);
      h.className = 'md-h';
      inline(heading[2] || '', h, 0);
      parent.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      flush();
      parent.append(document.createElement('hr'));
      i++;
      continue;
    }
    if (ITEM.test(line) && (para.length === 0 || /^\s*([-*+]|1[.)])\s/.test(line))) {
      flush();
      i = list(lines, i, parent, depth);
      continue;
    }
    const quote = QUOTE.exec(line);
    if (quote && depth < MAX_NESTING) {
      flush();
      const inner = [];
      while (i < lines.length) {
        const q = QUOTE.exec(lines[i]);
        if (!q) break;
        inner.push(q[1]);
        i++;
      }
      const node = document.createElement('blockquote');
      blocks(inner, node, depth + 1);
      parent.append(node);
      continue;
    }
    if (tableAt(lines, i)) {
      flush();
      i = table(lines, i, parent);
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
}

/**
 * The model's Markdown as DOM nodes: headings, paragraphs, emphasis, inline code, fenced
 * code, lists, quotes, rules, pipe tables, and links to http(s) addresses only
 * (rel=noopener). Built with
 * createElement and text nodes only: HTML in the text (a <script>, an <img onerror>) is
 * shown as the text it is.
 */
function markdown(text) {
  const root = el('div', 'md');
  blocks(String(text).replace(/\r\n?/g, '\n').split('\n'), root, 0);
  return root;
}

// ---- the token and the API ----

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let tokenWaiters = [];

/** Shows the token field; resolves once a token was entered. */
function askToken(message) {
  $('#auth-message').textContent = message;
  $('#auth').hidden = false;
  $('#token-input').focus();
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

function saveToken(event) {
  event.preventDefault();
  const token = $('#token-input').value.trim();
  if (!token) return;
  state.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
  $('#token-input').value = '';
  $('#auth').hidden = true;
  const waiters = tokenWaiters;
  tokenWaiters = [];
  waiters.forEach((resolve) => resolve());
}

function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  if (state.token) headers.Authorization = 'Bearer ' + state.token;
  return headers;
}

function authMessage(data) {
  const why = (data && data.error) || 'the server needs a token';
  return state.token ? 'The server refused the token (' + why + '). Enter it again:'
    : 'This server needs a token (' + why + '). Enter it:';
}

/**
 * One request whose answer is JSON: `init()` makes its fetch options (the token included) for
 * each try; a 401 asks for the token and retries; an error answer throws an ApiError.
 */
async function request(path, init) {
  for (;;) {
    let response;
    try {
      response = await fetch(path, init());
    } catch (e) {
      throw new ApiError(0, 'cannot reach the server (' + e.message + ')');
    }
    const data = await response.json().catch(() => null);
    if (response.status === 401) {
      await askToken(authMessage(data));
      continue;
    }
    if (!response.ok) {
      throw new ApiError(response.status, (data && data.error) || response.statusText || 'failed');
    }
    return data;
  }
}

/** One API call: JSON in and out. */
function api(method, path, body) {
  return request(path, () => {
    const init = { method, headers: authHeaders({ Accept: 'application/json' }) };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return init;
  });
}

const sessionPath = (sid, rest) => '/api/sessions/' + enc(sid) + rest;

// ---- the event stream (fetch + ReadableStream, so the token can be sent) ----

class EventStream {
  /** `path`'s SSE stream; `resume` sends Last-Event-ID on a reconnection. */
  constructor(path, onEvent, onState, resume) {
    Object.assign(this, { path, onEvent, onState, resume, lastId: 0, stopped: false, controller: null });
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    let backoff = 500;
    while (!this.stopped) {
      this.onState('connecting…');
      try {
        if (await this.connect()) backoff = 500;
      } catch (e) {
        if (this.stopped) return;
        if (e instanceof ApiError && e.status === 401) {
          await askToken(e.message);
          continue;
        }
        this.onState('stream error: ' + e.message);
      }
      if (this.stopped) return;
      this.onState('disconnected; reconnecting in ' + backoff / 1000 + ' s');
      await new Promise((resolve) => setTimeout(resolve, backoff));
      backoff = Math.min(backoff * 2, 10000);
    }
  }

  /** Reads one connection to its end; true when it got through. */
  async connect() {
    this.controller = new AbortController();
    const headers = authHeaders({ Accept: 'text/event-stream' });
    if (this.resume && this.lastId > 0) headers['Last-Event-ID'] = String(this.lastId);
    const response = await fetch(this.path, {
      headers,
      signal: this.controller.signal,
      cache: 'no-store',
    });
    if (!response.ok) {
      const data = await response.json().catch(() => null);
      throw new ApiError(response.status,
        response.status === 401 ? authMessage(data) : (data && data.error) || response.statusText);
    }
    this.onState('live');
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    let data = [];
    let id = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return true;
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n')) >= 0) {
        let line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length) this.dispatch(id, data.join('\n'));
          data = [];
          id = null;
          continue;
        }
        if (line.startsWith(':')) continue; // a comment (keep-alive)
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? '' : line.slice(colon + 1);
        if (text.startsWith(' ')) text = text.slice(1);
        if (field === 'data') data.push(text);
        else if (field === 'id') id = text;
      }
    }
  }

  dispatch(id, text) {
    const seq = Number(id);
    if (this.resume && Number.isInteger(seq) && seq > 0) {
      if (seq <= this.lastId) return; // seen already
      this.lastId = seq;
    }
    let event;
    try {
      event = JSON.parse(text);
    } catch (_) {
      return;
    }
    if (!this.stopped) this.onEvent(event);
  }
}

// ---- sessions ----

function validSession(sid) {
  if (!sid) return 'enter a session id';
  if (!SESSION_ID.test(sid)) {
    return sid.startsWith('.') ? "a session id cannot start with '.'"
      : 'use 1 to 128 of A-Z a-z 0-9 . _ -';
  }
  return '';
}

/** "14:05" today, else "2025-05-01"; '' when unknown. */
function when(rfc3339) {
  if (!rfc3339) return '';
  const t = new Date(rfc3339);
  if (Number.isNaN(t.getTime())) return '';
  const now = new Date();
  const pad = (n) => String(n).padStart(2, '0');
  if (t.toDateString() === now.toDateString()) return pad(t.getHours()) + ':' + pad(t.getMinutes());
  return t.getFullYear() + '-' + pad(t.getMonth() + 1) + '-' + pad(t.getDate());
}

function waitingTotal() {
  let total = 0;
  for (const row of state.sessions.values()) total += Number(row.pending_approvals) || 0;
  return total;
}

/** The tab's title says when something waits for an answer, in any session. */
function updateTitle() {
  const total = waitingTotal();
  document.title = total ? '(' + total + ') waiting · ' + TITLE : TITLE;
  show($('#sessions-waiting'), total ? 'waiting ' + total : '');
}

/** The session list, folded away on a narrow page once a session is open (a toggle shows it). */
function setSessionsOpen(open) {
  $('#sidebar').classList.toggle('collapsed', !open);
  const toggle = $('#sessions-toggle');
  toggle.textContent = open ? 'Hide' : 'Show';
  toggle.setAttribute('aria-expanded', String(open));
}

/** The tools that never ask (those a read_only session keeps), to tell a queued call. */
async function loadReadTools() {
  try {
    const tools = await api('GET', '/api/tools?mode=read_only');
    state.readTools = new Set((Array.isArray(tools) ? tools : []).map(
      (t) => (t && t.function && t.function.name) || (t && t.name)).filter(Boolean));
    updateCalls();
  } catch (_) {
    // Unknown: a call that has not asked counts as one that may.
  }
}

/** Fills a session's button in the list with its row (the button itself stays). */
function fillSessionButton(button, row) {
  const top = el('span', 'session-top');
  top.append(el('span', 'session-id', row.id));
  const waiting = Number(row.pending_approvals) || 0;
  if (waiting) {
    const badge = el('span', 'badge waiting', 'waiting ' + waiting);
    badge.title = waiting + (waiting === 1 ? ' call waits' : ' calls wait') + ' for your answer';
    top.append(badge);
  } else if (row.running) {
    top.append(el('span', 'badge running', 'running'));
  }
  const parts = [top];
  if (row.first_message || row.last_activity) {
    const line = el('span', 'session-detail');
    if (row.first_message) line.append(el('span', 'first-message', row.first_message));
    if (row.last_activity) {
      const time = el('time', 'last-activity', when(row.last_activity));
      time.dateTime = row.last_activity;
      time.title = 'last activity ' + row.last_activity;
      line.append(time);
    }
    parts.push(line);
  }
  button.replaceChildren(...parts);
  button.classList.toggle('waiting', waiting > 0);
  button.classList.toggle('selected', row.id === state.sid);
}

/**
 * Redraws the session list: most recent activity first, then by id. A session's button is
 * kept from one draw to the next (only what changed is redrawn), so a click is never lost
 * to an update arriving under the pointer.
 */
function renderSessions() {
  const list = $('#sessions');
  const rows = Array.from(state.sessions.values());
  rows.sort((a, b) => {
    const ta = a.last_activity || '';
    const tb = b.last_activity || '';
    if (ta !== tb) return ta < tb ? 1 : -1;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  });
  const kept = state.sessionItems || new Map();
  const next = new Map();
  const items = rows.map((row) => {
    let entry = kept.get(row.id);
    if (!entry) {
      const button = el('button', 'session');
      button.type = 'button';
      button.dataset.session = row.id;
      button.addEventListener('click', () => selectSession(row.id));
      const item = el('li');
      item.append(button);
      entry = { item, button, drawn: '' };
    }
    const drawn = JSON.stringify([row, row.id === state.sid]);
    if (entry.drawn !== drawn) {
      fillSessionButton(entry.button, row);
      entry.drawn = drawn;
    }
    next.set(row.id, entry);
    return entry.item;
  });
  state.sessionItems = next;
  if (!items.length) items.push(el('li', 'muted', 'no sessions yet'));
  if (state.sessionsOmitted) {
    items.push(el('li', 'muted', state.sessionsOmitted + ' older sessions not listed'));
  }
  // Moving the kept items into order keeps them (and their buttons) alive.
  const current = Array.from(list.children);
  if (current.length !== items.length || current.some((node, i) => node !== items[i])) {
    list.replaceChildren(...items);
  }
  updateTitle();
}

function onSessionsFeed(message) {
  if (!message) return;
  if (message.type === 'snapshot') {
    state.sessions = new Map();
    for (const row of message.sessions || []) state.sessions.set(row.id, row);
    state.sessionsOmitted = Number(message.omitted) || 0;
  } else if (message.type === 'session' && message.session && message.session.id) {
    state.sessions.set(message.session.id, message.session);
  } else {
    return;
  }
  show($('#session-error'), '');
  renderSessions();
}

/** Follows the session list live (GET /api/sessions/events): no refreshing by hand. */
function followSessions() {
  if (state.feed) state.feed.stop();
  state.feed = new EventStream('/api/sessions/events', onSessionsFeed, (text) => {
    $('#sessions-state').textContent = text === 'live' ? '' : text;
  }, false);
  state.feed.run();
}

function selectSession(sid) {
  const problem = validSession(sid);
  show($('#session-error'), problem && 'Invalid session id: ' + problem);
  if (problem) return;
  if (state.stream) state.stream.stop();
  Object.assign(state, {
    sid, calls: new Map(), approvals: new Map(), errors: new Map(), finished: new Set(), lastText: null,
    replay: { index: 0, total: 0, pages: new Map() },
    turnModes: new Map(), liveQuestion: null, planSeen: {},
  });
  history.replaceState(null, '', '#' + enc(sid));
  $('#no-session').hidden = true;
  $('#session').hidden = false;
  $('#session-title').textContent = sid;
  $('#events').replaceChildren();
  $('#plan-panel').hidden = true;
  $('#plan-body').replaceChildren();
  fitPlanPanel();
  setSessionsOpen(false);
  $('#replay-call').replaceChildren();
  $('#messages').replaceChildren();
  show($('#turn-error'), '');
  setRunning(false);
  for (const button of document.querySelectorAll('#sessions button.session')) {
    button.classList.toggle('selected', button.dataset.session === sid);
  }
  setView('live');
  show($('#upload-error'), '');
  loadInputs();
  const stream = new EventStream(sessionPath(sid, '/events'), renderEvent, (text) => {
    $('#stream-state').textContent = text;
  }, true);
  state.stream = stream;
  stream.run();
}

/** PUTs one file into the session's input/ folder, streamed; a 401 asks for the token. */
function uploadFile(sid, file) {
  return request(sessionPath(sid, '/input/' + enc(file.name)), () => ({
    method: 'PUT',
    headers: authHeaders({ Accept: 'application/json', 'Content-Type': 'application/octet-stream' }),
    body: file,
  }));
}

function bytesText(n) {
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
  return (n / 1024 / 1024).toFixed(1) + ' MiB';
}

/** Uploads the files a person chose or dropped, one at a time, saying where each landed. */
async function uploadFiles(files) {
  const sid = state.sid;
  if (!sid || !files || !files.length) return;
  show($('#upload-error'), '');
  const landed = [];
  for (const file of files) {
    $('#inputs').textContent = 'Uploading ' + file.name + ' (' + bytesText(file.size) + ')…';
    try {
      const done = await uploadFile(sid, file);
      landed.push(done.path + ' (' + bytesText(done.bytes) + ', in ' + done.real_path + ')');
    } catch (e) {
      show($('#upload-error'), file.name + ': ' + e.message);
    }
  }
  if (state.sid !== sid) return;
  await loadInputs();
  if (landed.length) {
    $('#inputs').textContent = 'Uploaded ' + landed.join('; ') + '. ' + $('#inputs').textContent;
  }
}

/** Shows what the session's input/ folder holds. */
async function loadInputs() {
  const sid = state.sid;
  if (!sid) return;
  try {
    const data = await api('GET', sessionPath(sid, '/input'));
    if (state.sid !== sid) return;
    const files = data.files.filter((f) => !f.link);
    $('#inputs').textContent = files.length
      ? 'input/ holds ' + files.map((f) => f.path + ' (' + bytesText(f.bytes) + ')').join(', ')
        + (data.truncated ? ', …' : '')
      : '';
  } catch (e) {
    $('#inputs').textContent = '';
  }
}

function setRunning(running) {
  const badge = $('#turn-state');
  badge.textContent = running ? 'running' : 'idle';
  badge.classList.toggle('running', running);
  $('#cancel').disabled = !running;
}

// ---- turns ----

function turnErrorText(e) {
  switch (e.status) {
    case 409: return 'This session is busy: a turn is already running. Wait for it to end or cancel it.';
    case 503: return 'No model is configured, so turns cannot run. Set [llm] or TOOLBOX_LLM_* and '
      + 'restart toolbox serve. (' + e.message + ')';
    case 404: return 'Unknown agent: ' + e.message;
    case 400: return 'The server refused the turn: ' + e.message;
    case 0: return e.message;
    default: return 'Error ' + e.status + ': ' + e.message;
  }
}

async function sendTurn(event) {
  event.preventDefault();
  const message = $('#message').value;
  if (!message.trim()) {
    show($('#turn-error'), 'Write a message first.');
    return;
  }
  const body = { message };
  if ($('#agent').value) body.agent = $('#agent').value;
  if ($('#mode').value) body.permission_mode = $('#mode').value;
  const sid = state.sid;
  $('#send').disabled = true;
  try {
    const started = await api('POST', sessionPath(sid, '/turns'), body);
    if (sid === state.sid) {
      $('#message').value = '';
      show($('#turn-error'), '');
      // A quick turn may have ended (over the event stream) before this answer came.
      if (!state.finished.has(started && started.turn_id)) setRunning(true);
    }
  } catch (e) {
    show($('#turn-error'), turnErrorText(e));
  } finally {
    $('#send').disabled = false;
  }
}

async function cancelTurn() {
  try {
    const data = await api('POST', sessionPath(state.sid, '/cancel'));
    if (!data.cancelled) show($('#turn-error'), 'Nothing was running in this session.');
  } catch (e) {
    show($('#turn-error'), 'Cannot cancel: ' + e.message);
  }
}

// ---- live events ----

/** Draws the model's text that arrived since the last draw. */
function drawText(entry) {
  entry.scheduled = false;
  if (entry.drawn === entry.raw) return;
  entry.drawn = entry.raw;
  const log = $('#events');
  const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 60;
  entry.body.replaceChildren(markdown(entry.raw));
  if (atEnd) follow(log);
}

/** Ends the current text block (drawn in full) before anything else goes in the log. */
function endText() {
  if (state.lastText) drawText(state.lastText);
  state.lastText = null;
}

/** Appends a node to the event log, indented by the agent's depth. */
function append(node, depth) {
  endText();
  if (depth) node.classList.add('depth', 'd' + Math.min(depth, 4));
  $('#events').append(node);
  return node;
}

function meta(parts) {
  return el('div', 'meta', parts.filter((p) => p !== undefined && p !== null && p !== '').join(' · '));
}

function agentLabel(ev) {
  return ev.depth ? 'agent ' + ev.agent + ' (depth ' + ev.depth + ')' : '';
}

function callCard(ev) {
  const card = el('div', 'call');
  card.dataset.callId = ev.id;
  const head = el('div', 'row call-head');
  const name = el('span', 'tool-name', ev.name);
  const status = el('span', 'badge status running', 'running');
  const elapsed = el('span', 'muted elapsed');
  head.append(name, status, elapsed, el('span', 'spacer'), el('span', 'muted', agentLabel(ev)));
  const args = el('pre', 'args', keyValueText(ev.arguments));
  const output = el('pre', 'output');
  output.hidden = true;
  const outputText = document.createTextNode('');
  output.append(outputText);
  // How far long work is (tool_call_progress): the latest report, a bar when the total is known.
  const progress = el('div', 'progress');
  progress.hidden = true;
  const progressBar = el('progress', 'progress-bar');
  progressBar.hidden = true;
  const progressText = el('span', 'progress-text');
  progress.append(progressBar, progressText);
  const approval = el('div', 'approval-slot');
  const result = el('div', 'result-slot');
  card.append(head, args, approval, progress, output, result);
  const parts = {
    card, status, elapsed, args, approval, output, outputText, result,
    progress, progressBar, progressText,
    turnId: ev.turn_id, tool: ev.name, asked: false, finished: false,
  };
  state.calls.set(ev.id, parts);
  return parts;
}

/** One block of a preview: fields, code (already numbered), a unified diff, or text. */
function previewBlock(block) {
  const kind = ['fields', 'code', 'diff', 'text'].includes(block && block.kind) ? block.kind : 'text';
  const text = block && typeof block.text === 'string' ? block.text : keyValueText(block && block.text);
  const pre = el('pre', 'block kind-' + kind);
  if (kind !== 'diff') {
    pre.textContent = text;
    return pre;
  }
  for (const line of linesOf(text)) {
    let cls = 'diff-ctx';
    if (line.startsWith('+++') || line.startsWith('---')) cls = 'diff-file';
    else if (line.startsWith('@@')) cls = 'diff-hunk';
    else if (line.startsWith('+')) cls = 'diff-add';
    else if (line.startsWith('-')) cls = 'diff-del';
    pre.append(el('span', 'diff-line ' + cls, line + '\n'));
  }
  return pre;
}

/**
 * What an approval shows: the call's preview (a one-line summary, then its blocks) when the
 * event carries one, else the arguments as key: value lines. A long one folds, with a
 * toggle, so the buttons below stay in sight.
 */
function approvalBody(ev) {
  const body = el('div', 'approval-body');
  const preview = ev && ev.preview;
  const content = el('div', 'fold');
  let size = 0;
  let lines = 0;
  if (preview && typeof preview === 'object' && (preview.summary || Array.isArray(preview.blocks))) {
    body.classList.add('has-preview');
    if (preview.summary) body.append(el('div', 'preview-summary', String(preview.summary)));
    const list = Array.isArray(preview.blocks) ? preview.blocks : [];
    for (const block of list.slice(0, MAX_BLOCKS)) {
      const node = previewBlock(block);
      size += node.textContent.length;
      lines += linesOf(node.textContent).length;
      content.append(node);
    }
    if (list.length > MAX_BLOCKS) {
      content.append(el('div', 'meta', (list.length - MAX_BLOCKS) + ' more blocks not shown'));
    }
  } else {
    const text = keyValueText(ev ? ev.arguments : null);
    size = text.length;
    lines = linesOf(text).length;
    content.append(el('pre', 'args kv', text));
  }
  body.append(content);
  if (lines > FOLD_LINES || size > FOLD_CHARS) {
    content.classList.add('folded');
    const toggle = el('button', 'small fold-toggle', 'show all (' + lines + ' lines)');
    toggle.type = 'button';
    toggle.addEventListener('click', () => {
      const folded = content.classList.toggle('folded');
      toggle.textContent = folded ? 'show all (' + lines + ' lines)' : 'show less';
    });
    body.append(toggle);
  }
  return body;
}

/**
 * Whether a call that has not asked yet may still have to ask: a call of a turn in `auto`
 * (or of a turn the page did not see start) to a tool that is not known to run unasked.
 */
function mayAsk(call) {
  const mode = state.turnModes.get(call.turnId);
  if (mode && mode !== 'auto') return false;
  if (call.tool === 'call_agent') return false; // it asks nothing itself
  return !(state.readTools && state.readTools.has(call.tool));
}

/**
 * The status of the calls that have neither asked nor finished. The server asks one
 * question at a time, in the order the model made the calls: while a question is open, a
 * later call that needs an answer too waits its turn to be asked; it is not running.
 */
function updateCalls() {
  const open = state.liveQuestion !== null;
  for (const call of state.calls.values()) {
    if (call.asked || call.finished) continue;
    const queued = open && mayAsk(call);
    const text = queued ? 'waiting to be asked' : 'running';
    if (call.status.textContent === text) continue;
    call.status.textContent = text;
    call.status.className = 'badge status ' + (queued ? 'queued' : 'running');
    call.status.title = queued ? 'queued: one question is asked at a time, and this call is '
      + 'asked once the open question is answered' : '';
  }
}

/**
 * One question at a time: of the open session's approvals still unanswered, only the
 * oldest has live buttons; the others say they are queued behind it.
 */
function updateQueue() {
  let live = null;
  for (const card of state.approvals.values()) {
    if (card.classList.contains('answered')) continue;
    const queued = live !== null;
    if (!queued) live = card;
    card.classList.toggle('queued', queued);
    card.querySelector('.queue-note').hidden = !queued;
    for (const button of card.querySelectorAll('button.decide')) {
      button.disabled = queued || card.dataset.sending === 'yes';
    }
  }
  const changed = live !== state.liveQuestion;
  state.liveQuestion = live;
  if (changed && live && live.isConnected) reveal($('#events'), live);
  updateCalls();
}

/**
 * The scroll positions of the log at which `card` is in sight: all of it when it fits,
 * else its buttons at the bottom edge. [lowest, highest] scrollTop.
 */
function sightRange(log, card) {
  const base = log.getBoundingClientRect().top - log.scrollTop;
  const box = card.getBoundingClientRect();
  const buttons = (card.querySelector('.buttons') || card).getBoundingClientRect();
  const pad = 8;
  const height = log.clientHeight;
  const top = box.top - base;
  const bottom = box.bottom - base;
  if (bottom - top + 2 * pad <= height) return [bottom + pad - height, top - pad];
  const end = buttons.bottom - base + pad - height;
  return [end, end];
}

/** Scrolls the log as little as needed to bring the open question in sight. */
function reveal(log, card) {
  const [low, high] = sightRange(log, card);
  if (log.scrollTop < low) log.scrollTop = low;
  else if (log.scrollTop > high) log.scrollTop = high;
}

/** Follows the log to its end, but never past the open question: it stays in sight. */
function follow(log) {
  let top = log.scrollHeight;
  const card = state.liveQuestion;
  if (card && card.isConnected) {
    const [low, high] = sightRange(log, card);
    top = Math.max(low, Math.min(top, high));
  }
  log.scrollTop = top;
}

/**
 * A card answered (by this page, another client, or the call's end): its buttons and its
 * feedback box go; the answer, and the feedback given with it, stay as text.
 */
function settleApproval(card, decision, text, feedback) {
  card.classList.add('answered');
  card.classList.remove('queued');
  card.dataset.answer = decision;
  for (const button of card.querySelectorAll('.buttons button')) button.remove();
  const box = card.querySelector('textarea.feedback');
  if (box) box.remove();
  card.querySelector('.queue-note').hidden = true;
  card.querySelector('.answer').textContent = text;
  const given = card.querySelector('.answer-feedback');
  if (given && feedback && String(feedback).trim()) {
    given.replaceChildren(el('span', 'meta', 'Feedback'), el('div', 'feedback-text', feedback));
    given.hidden = false;
  }
  updateQueue();
}

/** What a review card says once answered: the decision first, in a word. */
const REVIEW_WORDS = { approve: 'Approved', approved: 'Approved', reject: 'Rejected', rejected: 'Rejected' };

/** Who answered, for people: "http" of "http from 127.0.0.1:5 (loopback, no token)". */
function byWhom(by) {
  return String(by || '').split(' from ')[0];
}

async function answerApproval(sid, callId, decision, label, card) {
  if (card.classList.contains('queued') || card.classList.contains('answered')) return;
  card.dataset.sending = 'yes';
  updateQueue();
  const answer = card.querySelector('.answer');
  answer.textContent = 'sending…';
  const review = card.classList.contains('review');
  try {
    const body = { decision };
    const box = card.querySelector('textarea.feedback');
    const feedback = box ? box.value.trim() : '';
    if (feedback) body.feedback = box.value;
    if (box) box.disabled = true;
    await api('POST', '/api/tool-approval/' + enc(sid) + '/' + enc(callId), body);
    settleApproval(card, decision, review ? REVIEW_WORDS[decision] : 'Answered: ' + label,
      feedback && box.value);
  } catch (e) {
    const box = card.querySelector('textarea.feedback');
    if (box) box.disabled = false;
    if (e.status === 409) settleApproval(card, 'conflict', 'already answered');
    else if (e.status === 404) settleApproval(card, 'unknown', 'no call is waiting for this answer');
    else answer.textContent = 'Could not answer: ' + e.message;
  } finally {
    delete card.dataset.sending;
    updateQueue();
  }
}

function approvalCard(ev, review) {
  const card = el('div', review ? 'approval review' : 'approval');
  card.dataset.callId = ev.call_id;
  const head = el('div', 'row');
  if (review) {
    head.append(el('strong', '', 'Review requested'), el('span', 'tool-name', ev.tool));
  } else {
    head.append(el('strong', '', 'Approval needed'), el('span', 'tool-name', ev.tool),
      el('span', 'badge risk', 'risk: ' + ev.risk));
  }
  const buttons = el('div', 'row buttons');
  const sid = state.sid;
  for (const [decision, label, done] of (review ? REVIEW_DECISIONS : DECISIONS)) {
    const button = el('button', 'decide ' + decision, label);
    button.type = 'button';
    button.dataset.decision = decision;
    button.id = 'approval-' + decision + '-' + ev.call_id;
    button.addEventListener('click', () => answerApproval(sid, ev.call_id, decision, done, card));
    buttons.append(button);
  }
  const note = el('div', 'queue-note', 'queued: answer the one above first');
  note.hidden = true;
  const parts = [head, approvalBody(ev)];
  if (review) {
    const box = el('textarea', 'feedback');
    box.id = 'feedback-' + ev.call_id;
    box.rows = 3;
    box.maxLength = 16000;
    box.placeholder = 'Feedback for the model (optional): what to change, what to keep';
    parts.push(box);
  }
  const given = el('div', 'answer-feedback');
  given.hidden = true;
  card.append(...parts, buttons, note, el('div', 'answer'), given);
  state.approvals.set(ev.call_id, card);
  return card;
}

function spoolBox(path) {
  const box = el('div', 'spool');
  box.append('Full result spooled to ', el('code', '', path),
    ' (readable with file_manager__read). ');
  const button = el('button', 'small', 'Show full result');
  button.type = 'button';
  const sid = state.sid;
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      const data = await api('POST', sessionPath(sid, '/tools/file_manager__read'), { path });
      box.append(el('pre', 'result full', data.result));
      button.remove();
    } catch (e) {
      box.append(el('div', 'error', 'Cannot read it: ' + e.message));
      button.disabled = false;
    }
  });
  box.append(button);
  return box;
}

// ---- the plan panel ----

const STEP_MARKS = { pending: '[ ]', in_progress: '[>]', completed: '[x]', blocked: '[!]' };

/**
 * Where a part of the plan stands with the person, in words. A review is `draft` (never
 * asked, rejected, or changed since it was answered), `pending` (asked, no answer yet) or
 * `confirmed`; `previous` is the part as last drawn, which tells a rejection (a new answer)
 * from a change of a part that had been answered.
 */
function reviewWords(review, previous) {
  const r = review && typeof review === 'object' ? review : {};
  if (r.state === 'confirmed') return { words: 'approved', tone: 'ok' };
  if (r.state === 'pending') return { words: 'waiting for your review', tone: 'wait' };
  if (!r.by) return { words: 'not yet reviewed', tone: 'todo' };
  const again = (words, title) => ({ words: words + ': needs another review', tone: 'todo', title });
  if (previous) {
    if (previous.state === 'pending' && previous.at !== r.at) return again('rejected');
    if (previous.state === 'confirmed') return again('changed since approved');
    if (previous.at === r.at && previous.revision === r.revision) return previous.said;
    if (previous.said.words.startsWith('rejected')) return again('revised since rejected');
  }
  return again('not approved', 'rejected, or changed since its last review');
}

function stepLine(step) {
  const status = String(step.status || 'pending');
  let line = (STEP_MARKS[status] || '[ ]') + ' ' + (step.id ?? '') + '. ' + (step.title ?? '');
  if (status === 'in_progress') line += ' (in progress)';
  if (status === 'blocked') line += ' (blocked)';
  if (step.note) line += ' — ' + step.note;
  return el('li', 'step st-' + status.replace(/[^a-z_]/g, ''), line);
}

/** Keeps the plan panel open beside the log on a wide page; folded to its summary on a narrow one. */
function fitPlanPanel() {
  $('#plan-panel').open = !NARROW.matches;
  $('#plan-panel > summary').tabIndex = NARROW.matches ? 0 : -1;
}

/**
 * The session's plan from a plan_updated event: its goal and its checklist, each with where
 * its review stands in words (what still needs a person), and the steps' progress. A plan
 * the page cannot read is shown as the server's checklist text.
 */
function renderPlan(ev) {
  const panel = $('#plan-panel');
  const body = $('#plan-body');
  panel.hidden = false;
  const plan = ev.plan;
  if (!plan || typeof plan !== 'object' || (plan.steps !== undefined && !Array.isArray(plan.steps))) {
    body.replaceChildren(el('pre', 'plan-text', ev.checklist || ''));
    $('#plan-summary').textContent = '';
    $('#plan-progress').textContent = '';
    return;
  }
  const steps = (plan.steps || []).filter((step) => step && typeof step === 'object');
  const parts = [];
  if (plan.goal) parts.push({ key: 'goal', label: 'Goal', review: plan.goal_review });
  parts.push({ key: 'plan', label: 'Checklist', review: plan.plan_review });
  const sections = [];
  const summary = [];
  for (const part of parts) {
    const r = part.review && typeof part.review === 'object' ? part.review : {};
    const empty = part.key === 'plan' && !steps.length;
    const said = empty ? { words: 'no steps yet', tone: 'none' } : reviewWords(r, state.planSeen[part.key]);
    state.planSeen[part.key] = { state: r.state, at: r.at, revision: r.revision, said };
    const section = el('section', 'plan-part part-' + part.key);
    const head = el('div', 'plan-part-head');
    const words = el('span', 'plan-part-state tone-' + said.tone, said.words);
    if (said.title) words.title = said.title;
    head.append(el('strong', '', part.label), words);
    if (r.by && r.at && r.state !== 'pending') {
      const who = el('span', 'plan-part-by meta', when(r.at) + ' via ' + byWhom(r.by));
      who.title = r.by + ', ' + r.at;
      head.append(who);
    }
    section.append(head);
    if (part.key === 'goal') {
      section.append(el('div', 'plan-goal', plan.goal));
    } else if (!empty) {
      const list = el('ol', 'plan-steps');
      list.id = 'plan-checklist';
      list.append(...steps.map(stepLine));
      section.append(list);
    }
    if (r.feedback) section.append(el('div', 'plan-feedback', 'Feedback: ' + r.feedback));
    sections.push(section);
    summary.push(part.label + ': ' + said.words);
  }
  body.replaceChildren(...sections);
  $('#plan-summary').textContent = summary.join(' · ');
  const done = steps.filter((step) => step.status === 'completed').length;
  $('#plan-progress').textContent = steps.length ? done + ' of ' + steps.length + ' done' : '';
}

/** The error texts already on the page for a turn (each is shown once). */
function shownErrors(turnId) {
  const key = turnId || '';
  if (!state.errors.has(key)) state.errors.set(key, new Set());
  return state.errors.get(key);
}

const handlers = {
  turn_started(ev) {
    const node = el('div', 'turn-start');
    node.append(el('div', 'who', 'you'), el('div', 'user-message', ev.message),
      meta(['agent ' + ev.agent, 'mode ' + ev.permission_mode, ev.turn_id]));
    append(node, 0);
    state.turnModes.set(ev.turn_id, ev.permission_mode);
    setRunning(true);
  },
  text_delta(ev) {
    const key = ev.turn_id + '|' + ev.agent + '|' + ev.depth;
    if (!state.lastText || state.lastText.key !== key) {
      const node = el('div', 'text');
      if (ev.depth) node.append(el('div', 'meta', ev.agent));
      const body = el('div', 'text-body');
      node.append(body);
      append(node, ev.depth);
      state.lastText = { key, body, raw: '', drawn: null, scheduled: false };
    }
    const entry = state.lastText;
    entry.raw += ev.text;
    // Redrawn at most every 30 ms while it streams; in full before anything follows it.
    if (!entry.scheduled) {
      entry.scheduled = true;
      setTimeout(() => drawText(entry), 30);
    }
  },
  tool_call_started(ev) {
    append(callCard(ev).card, ev.depth);
    updateCalls();
  },
  tool_approval_request(ev) {
    const card = approvalCard(ev);
    const call = state.calls.get(ev.call_id);
    if (call) {
      call.asked = true;
      call.approval.append(card);
      call.args.hidden = true; // the card shows what the call will do
      call.status.title = '';
      call.status.textContent = 'waiting for approval';
      call.status.className = 'badge status waiting';
    } else {
      append(card, ev.depth);
    }
    updateQueue();
  },
  review_request(ev) {
    const card = approvalCard(ev, true);
    const call = state.calls.get(ev.call_id);
    if (call) {
      call.asked = true;
      call.approval.append(card);
      call.status.title = '';
      call.status.textContent = 'waiting for review';
      call.status.className = 'badge status waiting';
    } else {
      append(card, ev.depth);
    }
    updateQueue();
  },
  review_answered(ev) {
    const card = state.approvals.get(ev.call_id);
    if (!card || card.classList.contains('answered')) return;
    if (ev.answer === 'not_asked') {
      settleApproval(card, ev.answer, 'No answer: ' + (ev.feedback || 'no one could be asked'));
      return;
    }
    const said = (REVIEW_WORDS[ev.answer] || String(ev.answer)) + (ev.by ? ' · via ' + byWhom(ev.by) : '');
    settleApproval(card, ev.answer, said, ev.feedback);
  },
  plan_updated(ev) {
    renderPlan(ev);
  },
  tool_call_output(ev) {
    const call = state.calls.get(ev.call_id);
    if (!call) return;
    call.output.hidden = false;
    call.outputText.appendData(ev.stream === 'stdout' ? ev.text : '[' + ev.stream + '] ' + ev.text);
    const extra = call.outputText.length - MAX_OUTPUT;
    if (extra > 0) call.outputText.deleteData(0, extra);
  },
  tool_call_progress(ev) {
    const call = state.calls.get(ev.call_id);
    if (!call || call.finished) return;
    const done = Number(ev.done);
    const total = Number(ev.total);
    const known = Number.isFinite(done) && Number.isFinite(total) && total > 0;
    call.progress.hidden = false;
    call.progressBar.hidden = !known;
    if (known) {
      call.progressBar.max = total;
      call.progressBar.value = Math.min(done, total);
      call.progress.title = Math.floor(Math.min(done, total) * 100 / total) + '%';
    }
    call.progressText.textContent = String(ev.message || '');
  },
  tool_call_finished(ev) {
    let call = state.calls.get(ev.id);
    if (!call) {
      call = callCard({ id: ev.id, name: ev.tool, arguments: '', depth: ev.depth, agent: ev.agent });
      call.args.hidden = true;
      append(call.card, ev.depth);
    }
    call.finished = true;
    call.status.title = '';
    call.status.textContent = ev.status + (ev.error_kind ? ' (' + ev.error_kind + ')' : '');
    call.status.className = 'badge status st-' + ev.status;
    call.elapsed.textContent = timing(ev);
    call.card.classList.add('finished', 'st-' + ev.status);
    call.result.replaceChildren(el('div', 'meta', 'Result'), el('pre', 'result', ev.result_preview));
    if (ev.spool_path) call.result.append(spoolBox(ev.spool_path));
    const approval = state.approvals.get(ev.id);
    if (approval && !approval.classList.contains('answered')) {
      let what = 'no longer waiting (' + (ev.error_kind || ev.status) + ')';
      if (approval.classList.contains('review')) what = 'no answer recorded (the call ended)';
      else if (ev.status === 'done') what = 'approved (the call ran)';
      else if (ev.error_kind === 'denied') what = 'denied (the call did not run)';
      settleApproval(approval, 'finished', what);
    }
    updateCalls();
  },
  agent_started(ev) {
    const node = el('div', 'agent-start');
    node.append(el('strong', '', '↳ agent ' + ev.agent), ' called by ' + ev.parent + ': ',
      el('span', 'task', ev.task));
    append(node, ev.depth);
  },
  agent_finished(ev) {
    const node = el('div', 'agent-end');
    node.append(el('strong', '', '↲ agent ' + ev.agent + ' finished'), ' (' + ev.stop_reason + ')',
      el('pre', 'result', ev.result_preview));
    append(node, ev.depth);
  },
  error(ev) {
    const message = String(ev.message);
    const shown = shownErrors(ev.turn_id);
    if (shown.has(message)) return;
    shown.add(message);
    const warning = message.startsWith('warning:');
    append(el('div', warning ? 'event-warning' : 'event-error', message), 0);
  },
  turn_finished(ev) {
    const usage = ev.usage || {};
    const node = el('div', 'turn-end stop-' + ev.stop_reason);
    node.append(el('strong', '', 'Turn finished: ' + ev.stop_reason),
      meta([ev.steps + ' step' + (ev.steps === 1 ? '' : 's'),
        (usage.input_tokens || 0) + ' input tokens', (usage.output_tokens || 0) + ' output tokens']));
    // The notice of a turn that failed repeats the error shown above it: once is enough.
    if (ev.notice && !shownErrors(ev.turn_id).has(String(ev.notice))) {
      node.append(el('div', 'notice', ev.notice));
    }
    append(node, 0);
    state.finished.add(ev.turn_id);
    setRunning(false);
  },
};

function renderEvent(ev) {
  if (!ev || ev.session_id !== state.sid) return;
  const log = $('#events');
  const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 60;
  const asked = state.liveQuestion;
  const handler = handlers[ev.type];
  if (handler) handler(ev);
  else append(el('div', 'meta', 'event ' + ev.type), 0);
  // A question that just opened is brought in sight, wherever the log was; else the log
  // follows new events when it was at its end (never past the open question).
  if (state.liveQuestion && state.liveQuestion !== asked) reveal(log, state.liveQuestion);
  else if (atEnd) follow(log);
}

// ---- trajectory replay ----

async function replayCall(index) {
  const replay = state.replay;
  const offset = Math.floor(index / REPLAY_PAGE) * REPLAY_PAGE;
  if (!replay.pages.has(offset)) {
    const data = await api('GET', sessionPath(state.sid, '/trajectory?offset=' + offset
      + '&limit=' + REPLAY_PAGE));
    replay.total = data.total;
    replay.pages.set(offset, data.calls);
  }
  return (replay.pages.get(offset) || [])[index - offset];
}

async function showReplay(index) {
  const replay = state.replay;
  const box = $('#replay-call');
  try {
    if (!replay.pages.size) await replayCall(0);
    replay.index = Math.max(0, Math.min(index, replay.total - 1));
    const call = replay.total ? await replayCall(replay.index) : null;
    $('#replay-pos').textContent = replay.total
      ? 'call ' + (replay.index + 1) + ' of ' + replay.total : 'no calls in this session';
    $('#replay-prev').disabled = replay.index <= 0;
    $('#replay-next').disabled = replay.index >= replay.total - 1;
    box.replaceChildren();
    if (!call) return;
    const card = el('div', 'call finished st-' + call.status);
    const head = el('div', 'row call-head');
    head.append(el('span', 'tool-name', call.tool), el('span', 'badge status st-' + call.status,
      call.status + (call.error_kind ? ' (' + call.error_kind + ')' : '')),
    el('span', 'muted', timing(call)));
    card.append(head, meta(['call ' + call.id, 'started ' + call.started_at]),
      el('div', 'meta', 'Arguments'), el('pre', 'args', keyValueText(call.arguments)),
      el('div', 'meta', 'Result'), el('pre', 'result', call.result));
    if (call.spool_path) card.append(spoolBox(call.spool_path));
    box.append(card);
  } catch (e) {
    box.replaceChildren(el('p', 'error', 'Cannot read the trajectory: ' + e.message));
  }
}

function reloadReplay() {
  state.replay = { index: state.replay.index, total: 0, pages: new Map() };
  showReplay(state.replay.index);
}

// ---- the stored conversation ----

async function loadMessages() {
  const box = $('#messages');
  try {
    const data = await api('GET', sessionPath(state.sid, '/messages'));
    box.replaceChildren();
    for (const warning of data.warnings || []) box.append(el('div', 'event-warning', warning));
    if (!(data.messages || []).length) box.append(el('p', 'muted', 'No messages yet.'));
    for (const m of data.messages || []) {
      const node = el('div', 'message ' + m.role);
      node.append(el('div', 'who', m.role + (m.name ? ' · ' + m.name : '')));
      if (m.content && m.role === 'assistant') node.append(markdown(m.content));
      else if (m.content) node.append(el('div', 'content', m.role === 'tool' ? keyValueText(m.content) : m.content));
      for (const call of m.tool_calls || []) {
        node.append(el('div', 'meta', '→ ' + call.name), el('pre', 'args', keyValueText(call.arguments)));
      }
      box.append(node);
    }
  } catch (e) {
    box.replaceChildren(el('p', 'error', 'Cannot read the conversation: ' + e.message));
  }
}

// ---- views and start-up ----

function setView(view) {
  state.view = view;
  for (const tab of document.querySelectorAll('.tab')) {
    tab.setAttribute('aria-selected', String(tab.dataset.view === view));
  }
  for (const name of ['live', 'replay', 'messages']) $('#view-' + name).hidden = name !== view;
  if (view === 'replay') reloadReplay();
  if (view === 'messages') loadMessages();
}

async function loadHealth() {
  try {
    const h = await api('GET', '/api/health');
    $('#health').textContent = 'v' + h.version + ' · mode ' + h.mode + ' · ' + h.workspace;
  } catch (e) {
    $('#health').textContent = 'health: ' + e.message;
  }
}

async function loadAgents() {
  try {
    const data = await api('GET', '/api/agents');
    const select = $('#agent');
    select.replaceChildren(el('option', '', 'default'));
    select.firstChild.value = '';
    for (const agent of data.agents || []) {
      if (agent.name === 'default') continue;
      const option = el('option', '', agent.name);
      option.value = agent.name;
      option.title = agent.description || '';
      select.append(option);
    }
  } catch (_) {
    // The default agent still works.
  }
}

function start() {
  $('#auth').addEventListener('submit', saveToken);
  $('#token-button').addEventListener('click', async () => {
    await askToken('Enter the token toolbox serve was started with:');
    loadHealth();
    loadAgents();
    loadReadTools();
    followSessions();
  });
  $('#new-session').addEventListener('submit', (event) => {
    event.preventDefault();
    selectSession($('#session-input').value.trim());
  });
  $('#session-input').addEventListener('input', () => show($('#session-error'), ''));
  $('#composer').addEventListener('submit', sendTurn);
  $('#message').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) $('#composer').requestSubmit();
  });
  $('#cancel').addEventListener('click', cancelTurn);
  $('#upload-input').addEventListener('change', async (event) => {
    await uploadFiles(Array.from(event.target.files));
    event.target.value = '';
  });
  const drop = $('#view-live');
  drop.addEventListener('dragover', (event) => {
    if (!state.sid || !event.dataTransfer || !event.dataTransfer.types.includes('Files')) return;
    event.preventDefault();
    drop.classList.add('dropping');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('dropping'));
  drop.addEventListener('drop', (event) => {
    drop.classList.remove('dropping');
    if (!state.sid || !event.dataTransfer || !event.dataTransfer.files.length) return;
    event.preventDefault();
    uploadFiles(Array.from(event.dataTransfer.files));
  });
  for (const tab of document.querySelectorAll('.tab')) {
    tab.addEventListener('click', () => setView(tab.dataset.view));
  }
  $('#replay-prev').addEventListener('click', () => showReplay(state.replay.index - 1));
  $('#replay-next').addEventListener('click', () => showReplay(state.replay.index + 1));
  $('#replay-load').addEventListener('click', reloadReplay);
  $('#messages-load').addEventListener('click', loadMessages);
  $('#sessions-toggle').addEventListener('click', () => {
    setSessionsOpen($('#sidebar').classList.contains('collapsed'));
  });
  // On a wide page the plan is a column of its own, always open; on a narrow one its
  // summary line opens and folds it.
  $('#plan-panel > summary').addEventListener('click', (event) => {
    if (!NARROW.matches) event.preventDefault();
  });
  NARROW.addEventListener('change', fitPlanPanel);
  // When the log's box changes (the window, the plan panel above it, a taller composer),
  // the open question stays in sight.
  new ResizeObserver(() => {
    if (state.liveQuestion && state.liveQuestion.isConnected) reveal($('#events'), state.liveQuestion);
  }).observe($('#events'));
  loadHealth();
  loadAgents();
  loadReadTools();
  followSessions();
  let fromHash = '';
  try {
    fromHash = decodeURIComponent(location.hash.slice(1));
  } catch (_) {
    // A hash that is not ours.
  }
  if (fromHash && !validSession(fromHash)) selectSession(fromHash);
}

// What the browser test checks directly: the renderers, on values no server sends yet.
window.toolboxConsole = Object.freeze({ approvalBody, markdown, keyValueText, timing });

start();
