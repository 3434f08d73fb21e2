// unbroken.js: read an unbroken stream in a browser, in unbroken's normalized event format.
//
// One ES module, no dependencies, no build step. Served by the proxy (GET /unbroken.js).
//
//   import { start, attach } from "/unbroken.js";
//   const stream = await start("/v1/chat/completions", { body, headers });  // POSTs once
//   stream.addEventListener("change", () => render(stream.visibleText, stream.state));
//   stream.stop();                                                           // cancels upstream
//
// It reads GET /v1/streams/{id}/events?format=unbroken with fetch and a streaming reader (so an
// Authorization header works; or the stream token as ?token=), and parses the SSE itself. After a
// network error, a body that ended early, a content-idle stall (the watchdog: keep-alives do not
// count), going `offline`, `online` again or a tab shown again, it resumes with Last-Event-ID = the last seq it
// committed; it never sends the starting POST again. A frame whose seq it has is dropped.
//
// One state, `stream.state.name`: connecting, streaming, reconnecting (`attempt`, `delayMs`),
// then exactly one of completed, truncated, filtered, interrupted, failed, cancelled. The end
// state is the server's `end` event; `interrupted` by this module only once its retry budget is
// spent (the text kept); `failed` for a malformed frame, an unknown event kind, or a refusal
// (401, 404, ...) with its `httpStatus`. A 204 means the stream had ended: the state of the last
// end seen, else interrupted.

export const END_STATES = Object.freeze(
  ["completed", "truncated", "filtered", "interrupted", "failed", "cancelled"]);
const KINDS = new Set(["status", "delta", "end"]);
const RETRYABLE_HTTP = new Set([408, 425, 429]);
let segmenter = null;

const DEFAULTS = {
  token: null,        // the stream token (Unbroken-Stream-Token), sent as ?token=
  headers: {},        // e.g. { authorization: "Bearer ..." }, sent with every request
  retries: 5,         // reconnects in a row without a new frame before `interrupted`
  backoffMs: 250,     // first reconnect delay, doubled each attempt ...
  maxBackoffMs: 4000, // ... up to this
  idleMs: 30000,      // no status/delta/end for this long: reconnect (keep-alives do not count)
  graphemes: false,   // visibleText holds back the last grapheme cluster until it is complete
  after: 0,           // the seq the reader already has
};

export class UnbrokenStream extends EventTarget {
  constructor(base, streamId, options = {}) {
    super();
    this.base = String(base).replace(/\/+$/, "");
    this.streamId = streamId;
    this.options = { ...DEFAULTS, ...options };
    this.text = "";
    this.reasoning = "";
    this.toolCalls = [];    // [{ index, id, name, arguments }] in the order they began
    this._callById = new Map();
    this._callAtIndex = new Map(); // the latest call at each index
    this.lastSeq = this.options.after;
    this.duplicates = 0;    // frames dropped because their seq was already committed
    this.connections = 0;
    this.end = null;        // the data of the `end` event
    this.state = { name: "connecting", attempt: 0 };
    this._controller = null;
    this._wake = null;
    this._dropped = null;
    this._lastContent = performance.now();
    this._onOnline = () => this._resumeNow(false);
    // The device went offline: a connection may hang without an error, so it is given up now
    // (its frames are kept) and resumed by Last-Event-ID once a reconnect gets through.
    this._onOffline = () => { if (this.state.name === "streaming") this._drop("offline"); };
    this._onVisible = () => { if (document.visibilityState === "visible") this._resumeNow(true); };
    addEventListener("online", this._onOnline);
    addEventListener("offline", this._onOffline);
    document.addEventListener("visibilitychange", this._onVisible);
    const refused = this.options.refused;
    this.done = refused ? Promise.resolve(this._finish("failed", refused)) : this._run();
  }

  get ended() { return END_STATES.includes(this.state.name); }

  // The text to show: with `graphemes`, without its last grapheme cluster until the end (a
  // family emoji or a flag may arrive in pieces; the next delta or the end shows it whole).
  get visibleText() {
    if (!this.options.graphemes || this.ended || !this.text) return this.text;
    const tail = this.text.slice(-64);  // far longer than any grapheme cluster
    let last = 0;
    segmenter ??= new Intl.Segmenter(undefined, { granularity: "grapheme" });
    for (const { index } of segmenter.segment(tail)) last = index;
    return this.text.slice(0, this.text.length - tail.length + last);
  }

  // Stop the generation (POST /v1/streams/{id}/cancel); the state becomes `cancelled` (or the
  // end the stream reached first). Resolves to the cancel response's status (null: not sent,
  // or the network failed: the stream goes on, and stop() may be called again).
  async stop() {
    if (this.ended) return null;
    let response;
    try {
      response = await fetch(this._url("cancel"), { method: "POST", headers: this.options.headers });
    } catch {
      return null;
    }
    if (!this.ended && response.ok) {
      const summary = await response.json();
      if (typeof summary.text === "string") this.text = summary.text;
      if (Number.isInteger(summary.last_seq)) this.lastSeq = Math.max(this.lastSeq, summary.last_seq);
      this._finish(END_STATES.includes(summary.status) ? summary.status : "cancelled", {});
    } else if (!this.ended) {
      this._finish("failed", { httpStatus: response.status, reason: `cancel answered HTTP ${response.status}` });
    }
    return response.status;
  }

  // Stop reading without cancelling (the stream goes on; attach again to read on).
  close() { this._detach(); this._controller?.abort(); }

  _url(action, query = {}) {
    const url = new URL(`${this.base}/v1/streams/${encodeURIComponent(this.streamId)}/${action}`, location.href);
    if (this.options.token) url.searchParams.set("token", this.options.token);
    for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
    return url;
  }

  _set(state) {
    this.state = state;
    this.dispatchEvent(new Event("change"));
  }

  _finish(name, detail) {
    if (this.ended) return;
    this._detach();
    this._set({ name, ...detail, end: this.end });
    this._controller?.abort();
  }

  _detach() {
    removeEventListener("online", this._onOnline);
    removeEventListener("offline", this._onOffline);
    document.removeEventListener("visibilitychange", this._onVisible);
    this._wake?.();
  }

  // `online`, or the tab shown again: skip a reconnect's wait; a connection whose watchdog
  // should have fired while timers were throttled in the background is replaced now.
  _resumeNow(visible) {
    if (this.ended) return;
    if (this.state.name === "reconnecting") this._wake?.();
    else if (visible && performance.now() - this._lastContent > this.options.idleMs) this._drop("stalled");
  }

  _drop(why) { this._dropped = why; this._controller?.abort(); }

  async _run() {
    let attempt = 0;
    while (!this.ended) {
      let problem;
      try {
        problem = await this._read(attempt);
      } catch (error) {
        problem = this._dropped === "stalled" ? `no content for ${this.options.idleMs} ms`
          : this._dropped === "offline" ? "the device went offline" : `network: ${error.message || error}`;
      }
      if (this.ended) return;
      if (this._progress) attempt = 0;
      attempt += 1;
      if (attempt > this.options.retries) {
        this._finish("interrupted", { reason: problem, attempts: attempt - 1 });
        return;
      }
      const delayMs = Math.min(this.options.maxBackoffMs, this.options.backoffMs * 2 ** (attempt - 1));
      this._set({ name: "reconnecting", attempt, delayMs, reason: problem });
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, delayMs);
        this._wake = () => { clearTimeout(timer); resolve(); };
      });
      this._wake = null;
    }
  }

  // One connection: the frames after lastSeq until the end, or a reason to reconnect.
  async _read(attempt) {
    const controller = this._controller = new AbortController();
    this._dropped = null;
    this._progress = false;
    const headers = { ...this.options.headers, accept: "text/event-stream; profile=unbroken" };
    if (this.lastSeq > 0) headers["last-event-id"] = `${this.streamId}:${this.lastSeq}`;
    if (attempt === 0 && this.connections === 0) this._set({ name: "connecting", attempt: 0 });
    const stall = () => this._drop("stalled");
    let watchdog = setTimeout(stall, this.options.idleMs);
    const rearm = () => { clearTimeout(watchdog); watchdog = setTimeout(stall, this.options.idleMs); };
    try {
      this.connections += 1;
      const response = await fetch(this._url("events", { format: "unbroken" }),
        { headers, signal: controller.signal, cache: "no-store" });
      if (response.status === 204) {
        this._finish(this.end?.status ?? "interrupted", { httpStatus: 204, reason: "the stream had ended" });
        return null;
      }
      if (!response.ok) {
        const reason = await errorMessage(response);
        if (RETRYABLE_HTTP.has(response.status) || response.status >= 500) return `HTTP ${response.status}: ${reason}`;
        this._finish("failed", { httpStatus: response.status, reason });
        return null;
      }
      this._set({ name: "streaming", attempt });
      const reader = response.body.getReader();
      const decoder = new TextDecoder("utf-8");  // streaming mode: never half a character
      const parser = new EventParser((kind, id, data) => {
        this._frame(kind, id, data);
        rearm();
      });
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(decoder.decode(value, { stream: true }));
        if (this.ended) return null;
      }
      parser.push(decoder.decode());
      return this.ended ? null : "the response ended before the stream did";
    } finally {
      clearTimeout(watchdog);
    }
  }

  _frame(kind, id, data) {
    if (this.ended) return;
    if (!KINDS.has(kind)) return this._finish("failed", { reason: `unknown event kind "${kind}"` });
    const match = /^(.*):([0-9]+)$/s.exec(id);
    if (!match || match[1] !== this.streamId) {
      return this._finish("failed", { reason: `frame id "${id}" is not ${this.streamId}:<seq>` });
    }
    const seq = Number(match[2]);
    let value;
    try {
      value = JSON.parse(data);
    } catch (error) {
      return this._finish("failed", { reason: `malformed frame ${seq}: ${error.message}` });
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      return this._finish("failed", { reason: `malformed frame ${seq}: not a JSON object` });
    }
    this._lastContent = performance.now();
    if (kind === "end") {
      if (!END_STATES.includes(value.status)) {
        return this._finish("failed", { reason: `malformed end: status ${JSON.stringify(value.status)}` });
      }
      this.end = value;
      const reason = value.error?.message ?? value.raw_finish_reason ?? null;
      return this._finish(value.status, { reason, finishReason: value.finish_reason });
    }
    if (seq <= this.lastSeq) {
      this.duplicates += 1;
      return;
    }
    const problem = invalidDelta(value);
    if (problem) return this._finish("failed", { reason: `malformed frame ${seq}: ${problem}` });
    this.lastSeq = seq;
    this._progress = true;
    if (value.text) this.text += value.text;
    if (value.reasoning) this.reasoning += value.reasoning;
    for (const call of value.tool_calls ?? []) this._addToolCall(call);
    this.dispatchEvent(new Event("change"));
  }

  // A delta belongs to the call its id names, else to the latest call at its index; a new id at
  // an index another call holds is a call of its own (Ollama gives parallel calls index 0).
  // The same rule as the Python reader's (tool_calls.py).
  _addToolCall(call) {
    const id = call.id ?? null;
    let known = id === null ? undefined : this._callById.get(id);
    if (known === undefined) {
      known = this._callAtIndex.get(call.index);
      if (known !== undefined && id !== null && known.id !== null && known.id !== id) known = undefined;
    }
    if (known === undefined) {
      known = { index: call.index, id: null, name: null, arguments: "" };
      this.toolCalls.push(known);
      this._callAtIndex.set(call.index, known);
    }
    if (id !== null && known.id === null) {
      known.id = id;
      this._callById.set(id, known);
    }
    known.name ??= call.name ?? null;
    known.arguments += call.arguments;
  }
}

function invalidDelta(value) {
  for (const key of ["text", "reasoning", "status"]) {
    if (key in value && typeof value[key] !== "string") return `"${key}" is not a string`;
  }
  if ("tool_calls" in value && !(Array.isArray(value.tool_calls) && value.tool_calls.every(
    (call) => Number.isInteger(call?.index) && call.index >= 0 && typeof call.arguments === "string"
      && ["id", "name"].every((key) => !(key in call) || typeof call[key] === "string")))) {
    return `"tool_calls" is not a list of {index, id?, name?, arguments}`;
  }
  return null;
}

async function errorMessage(response) {
  const body = await response.text().catch(() => "");
  try {
    const error = JSON.parse(body).error;
    return typeof error === "string" ? error : error?.message ?? body.slice(0, 300);
  } catch {
    return body.slice(0, 300) || response.statusText;
  }
}

// Server-Sent Events, parsed as the WHATWG spec says (CR, LF or CRLF; comments; `id` without
// NUL), for the fields this format uses.
class EventParser {
  constructor(dispatch) {
    this.dispatch = dispatch;
    this.buffer = "";
    this.event = "";
    this.data = [];
    this.id = "";
    this.skipLF = false;
  }

  push(text) {
    // A CR that ended the last piece ended its line there; an LF right after it is the same
    // line end (CRLF cut between two reads), not an empty line.
    if (!text) return;
    if (this.skipLF && text.startsWith("\n")) text = text.slice(1);
    this.skipLF = text.endsWith("\r");
    this.buffer += text;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    this.buffer = lines.pop();  // no line end yet
    for (const line of lines) this._line(line);
  }

  _line(line) {
    if (line === "") {
      if (this.data.length) this.dispatch(this.event || "message", this.id, this.data.join("\n"));
      this.event = "";
      this.data = [];
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
  }
}

// Attach to a stream by id (after a reload, or one another page started).
export function attach(base, streamId, options = {}) {
  return new UnbrokenStream(base, streamId, options);
}

// POST the request that starts a stream, once, through the proxy; read its id and token from
// the response headers, leave its provider-format body, and read the stream normalized. A
// refusal gives a stream already `failed` with the status and the provider's message.
export async function start(url, { body, headers = {}, base = null, ...options } = {}) {
  const controller = new AbortController();
  const origin = base ?? new URL(url, location.href).origin;
  let response;
  try {
    response = await fetch(url, {
      method: "POST", signal: controller.signal,
      headers: { "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  } catch (error) {  // nothing was started (or nothing can tell which stream): not resent
    return new UnbrokenStream(origin, "", { ...options, headers,
      refused: { httpStatus: null, reason: `network: ${error.message || error}` } });
  }
  const streamId = response.headers.get("Unbroken-Stream-Id");
  if (!response.ok || !streamId) {
    const reason = response.ok ? "the response has no Unbroken-Stream-Id: not an unbroken proxy?"
      : await errorMessage(response);
    return new UnbrokenStream(origin, streamId ?? "", { ...options, headers,
      refused: { httpStatus: response.status, reason } });
  }
  const token = response.headers.get("Unbroken-Stream-Token");
  controller.abort();  // the proxy's producer reads the upstream whatever this connection does
  return new UnbrokenStream(origin, streamId, { token, headers, ...options });
}
