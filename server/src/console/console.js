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
const DECISIONS = [
  ['approve', 'Approve', 'approved'],
  ['deny', 'Deny', 'denied'],
  ['approve_for_session', 'Approve for session', 'approved for this session'],
];

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  sid: null,
  stream: null,
  calls: new Map(), // call id -> the card's parts
  approvals: new Map(), // call id -> approval card
  lastText: null, // {key, node}: where the next text_delta of the same agent goes
  replay: { index: 0, total: 0, pages: new Map() },
  view: 'live',
};

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

/** Arguments and other JSON, indented; JSON sent as text is parsed first. */
function formatValue(value) {
  if (typeof value === 'string') {
    if (!/^\s*[[{]/.test(value)) return value;
    try {
      value = JSON.parse(value);
    } catch (_) {
      return value;
    }
  }
  try {
    return JSON.stringify(value, null, 2);
  } catch (_) {
    return String(value);
  }
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

/** One API call: JSON in and out; a 401 asks for the token and retries. */
async function api(method, path, body) {
  for (;;) {
    const init = { method, headers: authHeaders({ Accept: 'application/json' }) };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
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

const sessionPath = (sid, rest) => '/api/sessions/' + enc(sid) + rest;

// ---- the event stream (fetch + ReadableStream, so the token can be sent) ----

class EventStream {
  constructor(sid, onEvent, onState) {
    Object.assign(this, { sid, onEvent, onState, lastId: 0, stopped: false, controller: null });
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
    if (this.lastId > 0) headers['Last-Event-ID'] = String(this.lastId);
    const response = await fetch(sessionPath(this.sid, '/events'), {
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
    if (Number.isInteger(seq) && seq > 0) {
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

async function loadSessions() {
  let data;
  try {
    data = await api('GET', '/api/sessions');
  } catch (e) {
    show($('#session-error'), 'Cannot list the sessions: ' + e.message);
    return;
  }
  const list = $('#sessions');
  list.replaceChildren();
  const rows = data.sessions || [];
  if (!rows.length) list.append(el('li', 'muted', 'no sessions yet'));
  for (const row of rows) {
    const button = el('button', 'session', row.id);
    button.type = 'button';
    button.dataset.session = row.id;
    if (row.id === state.sid) button.classList.add('selected');
    if (row.running) button.append(el('span', 'badge running', 'running'));
    button.addEventListener('click', () => selectSession(row.id));
    const item = el('li');
    item.append(button);
    list.append(item);
  }
}

function selectSession(sid) {
  const problem = validSession(sid);
  show($('#session-error'), problem && 'Invalid session id: ' + problem);
  if (problem) return;
  if (state.stream) state.stream.stop();
  Object.assign(state, {
    sid, calls: new Map(), approvals: new Map(), lastText: null,
    replay: { index: 0, total: 0, pages: new Map() },
  });
  history.replaceState(null, '', '#' + enc(sid));
  $('#no-session').hidden = true;
  $('#session').hidden = false;
  $('#session-title').textContent = sid;
  $('#events').replaceChildren();
  $('#replay-call').replaceChildren();
  $('#messages').replaceChildren();
  show($('#turn-error'), '');
  setRunning(false);
  for (const button of document.querySelectorAll('#sessions button.session')) {
    button.classList.toggle('selected', button.dataset.session === sid);
  }
  setView('live');
  const stream = new EventStream(sid, renderEvent, (text) => {
    $('#stream-state').textContent = text;
  });
  state.stream = stream;
  stream.run();
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
    await api('POST', sessionPath(sid, '/turns'), body);
    if (sid === state.sid) {
      $('#message').value = '';
      show($('#turn-error'), '');
      setRunning(true);
    }
  } catch (e) {
    show($('#turn-error'), turnErrorText(e));
  } finally {
    $('#send').disabled = false;
    loadSessions();
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

/** Appends a node to the event log, indented by the agent's depth. */
function append(node, depth) {
  if (depth) node.classList.add('depth', 'd' + Math.min(depth, 4));
  $('#events').append(node);
  state.lastText = null;
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
  const status = el('span', 'badge status', 'running');
  const elapsed = el('span', 'muted elapsed');
  head.append(name, status, elapsed, el('span', 'spacer'), el('span', 'muted', agentLabel(ev)));
  const args = el('pre', 'args', formatValue(ev.arguments));
  const output = el('pre', 'output');
  output.hidden = true;
  const outputText = document.createTextNode('');
  output.append(outputText);
  const approval = el('div', 'approval-slot');
  const result = el('div', 'result-slot');
  card.append(head, args, approval, output, result);
  const parts = { card, status, elapsed, approval, output, outputText, result };
  state.calls.set(ev.id, parts);
  return parts;
}

function settleApproval(card, decision, text) {
  card.classList.add('answered');
  card.dataset.answer = decision;
  for (const button of card.querySelectorAll('button')) button.remove();
  card.querySelector('.answer').textContent = text;
}

async function answerApproval(sid, callId, decision, label, card) {
  const buttons = card.querySelectorAll('button.decide');
  buttons.forEach((b) => { b.disabled = true; });
  const answer = card.querySelector('.answer');
  answer.textContent = 'sending…';
  try {
    await api('POST', '/api/tool-approval/' + enc(sid) + '/' + enc(callId), { decision });
    settleApproval(card, decision, 'Answered: ' + label);
  } catch (e) {
    if (e.status === 409) settleApproval(card, 'conflict', 'already answered');
    else if (e.status === 404) settleApproval(card, 'unknown', 'no call is waiting for this answer');
    else {
      answer.textContent = 'Could not answer: ' + e.message;
      buttons.forEach((b) => { b.disabled = false; });
    }
  }
}

function approvalCard(ev) {
  const card = el('div', 'approval');
  card.dataset.callId = ev.call_id;
  const head = el('div', 'row');
  head.append(el('strong', '', 'Approval needed'), el('span', 'tool-name', ev.tool),
    el('span', 'badge risk', 'risk: ' + ev.risk));
  const buttons = el('div', 'row buttons');
  const sid = state.sid;
  for (const [decision, label, done] of DECISIONS) {
    const button = el('button', 'decide ' + decision, label);
    button.type = 'button';
    button.dataset.decision = decision;
    button.id = 'approval-' + decision + '-' + ev.call_id;
    button.addEventListener('click', () => answerApproval(sid, ev.call_id, decision, done, card));
    buttons.append(button);
  }
  card.append(head, el('pre', 'args', formatValue(ev.arguments)), buttons, el('div', 'answer'));
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

const handlers = {
  turn_started(ev) {
    const node = el('div', 'turn-start');
    node.append(el('div', 'who', 'you'), el('div', 'user-message', ev.message),
      meta(['agent ' + ev.agent, 'mode ' + ev.permission_mode, ev.turn_id]));
    append(node, 0);
    setRunning(true);
  },
  text_delta(ev) {
    const key = ev.turn_id + '|' + ev.agent + '|' + ev.depth;
    if (!state.lastText || state.lastText.key !== key) {
      const node = el('div', 'text');
      if (ev.depth) node.append(el('div', 'meta', ev.agent));
      const text = document.createTextNode('');
      node.append(text);
      append(node, ev.depth);
      state.lastText = { key, text };
    }
    state.lastText.text.appendData(ev.text);
  },
  tool_call_started(ev) {
    append(callCard(ev).card, ev.depth);
  },
  tool_approval_request(ev) {
    const card = approvalCard(ev);
    const call = state.calls.get(ev.call_id);
    if (call) {
      call.approval.append(card);
      call.status.textContent = 'waiting for approval';
      call.status.className = 'badge status waiting';
    } else {
      append(card, ev.depth);
    }
  },
  tool_call_output(ev) {
    const call = state.calls.get(ev.call_id);
    if (!call) return;
    call.output.hidden = false;
    call.outputText.appendData(ev.stream === 'stdout' ? ev.text : '[' + ev.stream + '] ' + ev.text);
    const extra = call.outputText.length - MAX_OUTPUT;
    if (extra > 0) call.outputText.deleteData(0, extra);
  },
  tool_call_finished(ev) {
    let call = state.calls.get(ev.id);
    if (!call) {
      call = callCard({ id: ev.id, name: ev.tool, arguments: '', depth: ev.depth, agent: ev.agent });
      append(call.card, ev.depth);
    }
    call.status.textContent = ev.status + (ev.error_kind ? ' (' + ev.error_kind + ')' : '');
    call.status.className = 'badge status st-' + ev.status;
    call.elapsed.textContent = ev.elapsed_ms + ' ms';
    call.card.classList.add('finished', 'st-' + ev.status);
    call.result.replaceChildren(el('div', 'meta', 'Result'), el('pre', 'result', ev.result_preview));
    if (ev.spool_path) call.result.append(spoolBox(ev.spool_path));
    const approval = state.approvals.get(ev.id);
    if (approval && !approval.classList.contains('answered')) {
      let what = 'no longer waiting (' + (ev.error_kind || ev.status) + ')';
      if (ev.status === 'done') what = 'approved (the call ran)';
      else if (ev.error_kind === 'denied') what = 'denied (the call did not run)';
      settleApproval(approval, 'finished', what);
    }
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
    const warning = String(ev.message).startsWith('warning:');
    append(el('div', warning ? 'event-warning' : 'event-error', ev.message), 0);
  },
  turn_finished(ev) {
    const usage = ev.usage || {};
    const node = el('div', 'turn-end stop-' + ev.stop_reason);
    node.append(el('strong', '', 'Turn finished: ' + ev.stop_reason),
      meta([ev.steps + ' step' + (ev.steps === 1 ? '' : 's'),
        (usage.input_tokens || 0) + ' input tokens', (usage.output_tokens || 0) + ' output tokens']));
    if (ev.notice) node.append(el('div', 'notice', ev.notice));
    append(node, 0);
    setRunning(false);
    loadSessions();
  },
};

function renderEvent(ev) {
  if (!ev || ev.session_id !== state.sid) return;
  const log = $('#events');
  const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 60;
  const handler = handlers[ev.type];
  if (handler) handler(ev);
  else append(el('div', 'meta', 'event ' + ev.type), 0);
  if (atEnd) log.scrollTop = log.scrollHeight;
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
    el('span', 'muted', call.elapsed_ms + ' ms'));
    card.append(head, meta(['call ' + call.id, 'started ' + call.started_at]),
      el('div', 'meta', 'Arguments'), el('pre', 'args', formatValue(call.arguments)),
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
      if (m.content) node.append(el('div', 'content', formatValue(m.content)));
      for (const call of m.tool_calls || []) {
        node.append(el('div', 'meta', '→ ' + call.name + ' ' + formatValue(call.arguments)));
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
    loadSessions();
  });
  $('#refresh-sessions').addEventListener('click', loadSessions);
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
  for (const tab of document.querySelectorAll('.tab')) {
    tab.addEventListener('click', () => setView(tab.dataset.view));
  }
  $('#replay-prev').addEventListener('click', () => showReplay(state.replay.index - 1));
  $('#replay-next').addEventListener('click', () => showReplay(state.replay.index + 1));
  $('#replay-load').addEventListener('click', reloadReplay);
  $('#messages-load').addEventListener('click', loadMessages);
  loadHealth();
  loadAgents();
  loadSessions();
  let fromHash = '';
  try {
    fromHash = decodeURIComponent(location.hash.slice(1));
  } catch (_) {
    // A hash that is not ours.
  }
  if (fromHash && !validSession(fromHash)) selectSession(fromHash);
}

start();
