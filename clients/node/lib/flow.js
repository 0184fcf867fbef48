'use strict';

/**
 * Flows (PROTOCOL.md, "Flows"): named jobs of any functions and the edges between them,
 * submitted in one call. What needs no server lives here: reading a flow document (the JSON
 * of the HTTP API's `POST /v1/flows` and of `wasmgear flow submit`), checking the whole graph
 * with the Rust client's sentences (crates/client/src/flow/mod.rs, `Flow::check`) so that
 * every producer refuses a bad graph alike, the record `flow_create` keeps, and a flow's
 * status from that record and its jobs' `outcomes`. lib/client.js does the calls.
 */

const { BadInputError, WasmgearError } = require('./errors');
const { checkFunction, parseJobId } = require('./names');
const { LIMITS, POLICIES, POLICY_OPTION, CONTROL, jobOptions } = require('./options');

/** The keys of the `{flows}` slot, in the order `flow_create` takes them. */
const FLOW_KEYS = Object.freeze({
  seq: 'wg:{flows}:seq',
  records: 'wg:{flows}:records',
  due: 'wg:{flows}:due',
});

/** The most jobs one `outcomes` call reads (the library's MAX_OUTCOMES). */
const MAX_OUTCOMES = 1000;

/** The states in the order a flow's counts list them (as the Rust client's). */
const STATE_ORDER = Object.freeze([
  'waiting',
  'scheduled',
  'queued',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'expired',
  'missing',
]);

const FINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

/** The fields of a flow document and of one of its jobs (the Rust `FlowDocument`'s). */
const DOCUMENT_FIELDS = ['name', 'jobs'];
const JOB_FIELDS = [
  'function',
  'input',
  'input_base64',
  'input_json',
  'priority',
  'delay_ms',
  'at_ms',
  'attempts',
  'timeout_ms',
  'retention_ms',
  'failed_retention_ms',
  'tags',
  'group',
  'after',
  'traceparent',
  'tracestate',
];
const EDGE_FIELDS = ['job', 'on_failure'];

/**
 * Options a flow's job may not take (its jobs are always new), by the field that would give
 * them, with the words of the Rust check's refusal. A document may name them, to be told so.
 */
const REFUSED = Object.freeze({
  uniq: 'uniq',
  once: 'once',
  schedule: "a schedule's tick",
  tick: "a schedule's tick",
  parent: 'parent',
});

/** How the checks of a document's job name its options: as the document writes them. */
const DOCUMENT_SHOWN = Object.freeze({
  delayMs: 'delay_ms',
  at: 'at_ms',
  timeoutMs: 'timeout_ms',
  retentionMs: 'retention_ms',
  failedRetentionMs: 'failed_retention_ms',
  onFailure: 'on_failure',
});

/** The latest time a Date holds (ms): any later `at_ms` is more than 10 years ahead anyway. */
const LAST_DATE_MS = 8.64e15;

/** A string quoted as the Rust messages quote it (`{:?}`). */
const quote = (text) => JSON.stringify(text);

/** A refusal of the flow, as the Rust client's `QueueError::BadOption`. */
function refuse(text) {
  return new BadInputError(`invalid job option: ${text}`);
}

/** A document that does not read (a field of the wrong type, unknown, or missing). */
function unreadable(path, what) {
  return refuse(`the flow does not read: ${path ? `${path}: ` : ''}${what}`);
}

/** Orders strings as Rust orders them (by their UTF-8 bytes): the order of a BTreeMap. */
function byBytes(a, b) {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

const isObject = (value) =>
  value !== null && typeof value === 'object' && !Array.isArray(value) && !ArrayBuffer.isView(value);
const given = (value) => value !== undefined && value !== null;

/** Refuses the fields of `object` not in `known`. */
function knownFields(object, known, path) {
  for (const field of Object.keys(object)) {
    if (!known.includes(field)) {
      throw unreadable(path, `unknown field ${quote(field)}, expected one of ${known.join(', ')}`);
    }
  }
}

/** A whole number in [min, max] (a field read as an integer type), or throws. */
function whole(value, path, min, max) {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw unreadable(path, `${JSON.stringify(value) ?? String(value)} is not a whole number in ${min}..=${max}`);
  }
  return value;
}

/**
 * The compact JSON text of `value` with every object's keys in Rust's order, as serde_json
 * writes a `Value` (the job's input from `input_json` is the same bytes whichever producer
 * sent the document).
 */
function compactJson(value) {
  const write = (v) => {
    if (Array.isArray(v)) return `[${v.map(write).join(',')}]`;
    if (v !== null && typeof v === 'object') {
      const keys = Object.keys(v).sort(byBytes);
      return `{${keys.map((k) => `${JSON.stringify(k)}:${write(v[k])}`).join(',')}}`;
    }
    return JSON.stringify(v);
  };
  // Through JSON once: toJSON, undefined and the like as JSON.stringify has them.
  return write(JSON.parse(JSON.stringify(value)));
}

/** Decodes standard base64 (with its padding), refusing what is not, as Rust's decoder does. */
function base64(text) {
  const trimmed = text.trim();
  if (trimmed.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(trimmed)) {
    throw new Error('give standard base64 (A-Z, a-z, 0-9, +, /) padded with = to a multiple of 4');
  }
  const bytes = Buffer.from(trimmed, 'base64');
  if (bytes.toString('base64') !== trimmed) {
    throw new Error('its last symbol has bits set that no byte holds');
  }
  return bytes;
}

/**
 * Reads a flow document (an object, or its JSON text) into a flow: `{name, jobs}`, the jobs
 * in the order of their names (as the Rust reader's map keeps them), each `{name, function,
 * input (bytes), options (enqueue's, with the ids of jobs outside the flow in after and
 * onFailure), refused (options a flow's job may not take), after: [{job, onFailure}]}`.
 * Throws BadInputError naming what does not read.
 */
function readFlowDocument(document) {
  if (typeof document === 'string') {
    try {
      document = JSON.parse(document);
    } catch (error) {
      throw unreadable('', error.message);
    }
  }
  if (!isObject(document)) {
    throw unreadable('', 'a flow is an object {name, jobs: {NAME: {function, ...}}}');
  }
  knownFields(document, DOCUMENT_FIELDS, '');
  if (document.name === undefined) throw unreadable('', 'missing field "name"');
  if (typeof document.name !== 'string') throw unreadable('name', 'must be a string');
  if (document.jobs === undefined) throw unreadable('', 'missing field "jobs"');
  if (!isObject(document.jobs)) {
    throw unreadable('jobs', 'must be an object of jobs by name ({NAME: {function, ...}})');
  }
  const names = Object.keys(document.jobs).sort(byBytes);
  // First every field's type, as a whole (nothing is converted before all reads).
  for (const name of names) readJobFields(document.jobs[name], `jobs.${name}`);
  const jobs = names.map((name) => {
    try {
      return intoJob(name, document.jobs[name]);
    } catch (error) {
      throw refuse(`job ${quote(name)}: ${error.message}`);
    }
  });
  return { name: document.name, jobs };
}

/** Checks the types of one job's fields. */
function readJobFields(job, path) {
  if (!isObject(job)) throw unreadable(path, 'a job is an object {function, input?, after?, ...}');
  knownFields(job, [...JOB_FIELDS, ...Object.keys(REFUSED)], path);
  if (job.function === undefined) throw unreadable(path, 'missing field "function"');
  if (typeof job.function !== 'string') throw unreadable(`${path}.function`, 'must be a string');
  if (given(job.input) && typeof job.input !== 'string' && !(job.input instanceof Uint8Array)) {
    throw unreadable(`${path}.input`, 'must be a string (or, from Node, a Buffer)');
  }
  if (given(job.input_base64) && typeof job.input_base64 !== 'string') {
    throw unreadable(`${path}.input_base64`, 'must be a string');
  }
  if (given(job.priority)) whole(job.priority, `${path}.priority`, -(2 ** 31), 2 ** 31 - 1);
  if (given(job.attempts)) whole(job.attempts, `${path}.attempts`, 0, 2 ** 32 - 1);
  for (const field of ['delay_ms', 'at_ms', 'timeout_ms', 'retention_ms', 'failed_retention_ms']) {
    if (given(job[field])) whole(job[field], `${path}.${field}`, 0, Number.MAX_SAFE_INTEGER);
  }
  if (given(job.tags)) {
    if (!Array.isArray(job.tags)) throw unreadable(`${path}.tags`, 'must be an array of strings');
    job.tags.forEach((tag, i) => {
      if (typeof tag !== 'string') throw unreadable(`${path}.tags[${i}]`, 'must be a string');
    });
  }
  for (const field of ['group', 'traceparent', 'tracestate']) {
    if (given(job[field]) && typeof job[field] !== 'string') {
      throw unreadable(`${path}.${field}`, 'must be a string');
    }
  }
  if (given(job.after)) {
    if (!Array.isArray(job.after)) {
      throw unreadable(`${path}.after`, 'must be an array of job names (or ids), or {job, on_failure}');
    }
    job.after.forEach((entry, i) => {
      const at = `${path}.after[${i}]`;
      if (typeof entry === 'string') return;
      if (!isObject(entry)) throw unreadable(at, "give a job's name (or id), or {job, on_failure}");
      knownFields(entry, EDGE_FIELDS, at);
      if (typeof entry.job !== 'string') throw unreadable(`${at}.job`, "must be a job's name (or id)");
      if (given(entry.on_failure) && typeof entry.on_failure !== 'string') {
        throw unreadable(`${at}.on_failure`, `must be one of ${POLICIES.join(', ')}`);
      }
    });
  }
}

/** One job of the document as a flow's job (its fields' types checked), or throws why not. */
function intoJob(name, job) {
  const fn = checkFunction(job.function);
  const forms = ['input', 'input_base64', 'input_json'].filter((field) => given(job[field]));
  if (forms.length > 1) throw new Error('give one of input, input_base64 and input_json, not several');
  let input = Buffer.alloc(0);
  if (given(job.input)) {
    input =
      typeof job.input === 'string'
        ? Buffer.from(job.input, 'utf8')
        : Buffer.from(job.input.buffer, job.input.byteOffset, job.input.byteLength);
  } else if (given(job.input_base64)) {
    try {
      input = base64(job.input_base64);
    } catch (error) {
      throw new Error(`input_base64 is not base64: ${error.message}`);
    }
  } else if (given(job.input_json)) {
    try {
      input = Buffer.from(compactJson(job.input_json), 'utf8');
    } catch (error) {
      throw new Error(`input_json does not write as JSON: ${error.message}`);
    }
  }
  const options = {};
  if (given(job.priority)) options.priority = job.priority;
  if (given(job.attempts)) options.attempts = job.attempts;
  if (given(job.timeout_ms)) options.timeoutMs = job.timeout_ms;
  if (given(job.retention_ms)) options.retentionMs = job.retention_ms;
  if (given(job.failed_retention_ms)) options.failedRetentionMs = job.failed_retention_ms;
  if (given(job.delay_ms)) options.delayMs = job.delay_ms;
  if (given(job.at_ms)) options.at = new Date(Math.min(job.at_ms, LAST_DATE_MS));
  if (given(job.tags)) options.tags = job.tags;
  if (given(job.group)) options.group = job.group;
  // Its trace context (see EnqueueOptions.traceparent); without one, the client's own.
  if (given(job.traceparent)) options.traceparent = job.traceparent;
  if (given(job.tracestate)) options.tracestate = job.tracestate;
  const outside = [];
  const outsidePolicies = {};
  const after = [];
  for (const entry of job.after ?? []) {
    const target = typeof entry === 'string' ? entry : entry.job;
    const policy = typeof entry === 'string' || !given(entry.on_failure) ? 'cancel' : entry.on_failure;
    if (!POLICIES.includes(policy)) {
      throw new Error(`on_failure ${quote(policy)} is none of cancel, ignore and continue`);
    }
    // A name has no ':'; an id of a job outside the flow has.
    if (target.includes(':')) {
      let id;
      try {
        id = parseJobId(target).id;
      } catch {
        throw new Error(
          `after: ${quote(target)} is not a job id: a job id looks like \`echo:42\` (function, colon, number)`,
        );
      }
      if (policy !== 'cancel') outsidePolicies[id] = policy;
      outside.push(id);
    } else {
      after.push({ job: target, onFailure: policy });
    }
  }
  if (outside.length > 0) options.after = outside;
  if (Object.keys(outsidePolicies).length > 0) options.onFailure = outsidePolicies;
  const refused = Object.keys(REFUSED).filter((field) => given(job[field]));
  return { name, function: fn, input, options, refused, after };
}

/** Whether `name` can name a job of a flow: 1 to 200 letters, digits, `_`, `-` or `.`. */
function fitsJobName(name) {
  return (
    typeof name === 'string' &&
    name.length >= 1 &&
    name.length <= LIMITS.MAX_FLOW_NAME_BYTES &&
    /^[A-Za-z0-9_.-]*$/.test(name)
  );
}

/**
 * Checks the whole flow as the Rust client's `Flow::check` does, naming the first thing wrong
 * in the same sentence: the flow's name, a job's name (or one given twice), a job's options
 * (refused ones first) or input, an edge to a job the flow does not have, to itself or twice,
 * too many dependencies, a cycle, more than 10,000 jobs. Returns the jobs' positions in an
 * order where every job comes after those it waits on (stable: the given order where the
 * edges allow), and each job's enqueue options as named options (its edges left out).
 *
 * @returns {{order: number[], named: string[][]}}
 */
function checkFlow(flow, maxInputBytes, nowMs = Date.now()) {
  const { name, jobs } = flow;
  const nameBytes = Buffer.byteLength(name, 'utf8');
  if (nameBytes === 0 || nameBytes > LIMITS.MAX_FLOW_NAME_BYTES || CONTROL.test(name)) {
    throw refuse(
      `the flow's name ${quote(name)} must be 1 to ${LIMITS.MAX_FLOW_NAME_BYTES} bytes without control characters`,
    );
  }
  if (jobs.length === 0) throw refuse(`flow ${quote(name)} has no jobs`);
  if (jobs.length > LIMITS.MAX_FLOW_JOBS) {
    throw refuse(
      `flow ${quote(name)} has ${jobs.length} jobs, more than the ${LIMITS.MAX_FLOW_JOBS} a flow may have`,
    );
  }
  const position = new Map();
  jobs.forEach((job, i) => {
    if (!fitsJobName(job.name)) {
      throw refuse(
        `job name ${quote(job.name)} must be 1 to ${LIMITS.MAX_FLOW_NAME_BYTES} letters, digits, '_', '-' or '.'`,
      );
    }
    if (position.has(job.name)) throw refuse(`job ${quote(job.name)} is named twice`);
    position.set(job.name, i);
  });
  const named = jobs.map((job) => checkJob(job, position, maxInputBytes, nowMs));
  return { order: topologicalOrder(jobs, position), named };
}

/** Checks one job of a flow (`Flow::check_job`); returns its enqueue options, named. */
function checkJob(job, position, maxInputBytes, nowMs) {
  const name = quote(job.name);
  const refused = (job.refused ?? []).map((field) => REFUSED[field] ?? field);
  if (refused.length > 0) {
    throw refuse(`job ${name}: a flow's jobs are always new, so they take no ${refused[0]}`);
  }
  let options;
  try {
    options = jobOptions(job.options, nowMs, DOCUMENT_SHOWN);
  } catch (error) {
    if (!(error instanceof BadInputError)) throw error;
    throw refuse(`job ${name}: ${error.message.replace(/^invalid job option: /, '')}`);
  }
  if (job.input.length > maxInputBytes) {
    throw refuse(
      `job ${name}: input of ${job.input.length} bytes is larger than the limit of ${maxInputBytes} bytes`,
    );
  }
  const seen = new Set();
  for (const edge of job.after) {
    if (!position.has(edge.job)) {
      throw refuse(`job ${name} waits on ${quote(edge.job)}, which the flow does not have`);
    }
    if (edge.job === job.name) throw refuse(`job ${name} waits on itself`);
    if (seen.has(edge.job)) throw refuse(`job ${name} waits on ${quote(edge.job)} twice`);
    seen.add(edge.job);
  }
  const count = job.after.length + options.after.length;
  if (count > LIMITS.MAX_DEPENDENCIES) {
    throw refuse(
      `job ${name} has ${count} dependencies, more than the limit of ${LIMITS.MAX_DEPENDENCIES}`,
    );
  }
  return options.named;
}

/** A queue of job positions handing out the lowest first (the Rust check's BTreeSet). */
class LowestFirst {
  #heap = [];

  get size() {
    return this.#heap.length;
  }

  push(value) {
    const heap = this.#heap;
    heap.push(value);
    let i = heap.length - 1;
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (heap[up] <= value) break;
      heap[i] = heap[up];
      i = up;
    }
    heap[i] = value;
  }

  pop() {
    const heap = this.#heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        if (left >= heap.length) break;
        const child = left + 1 < heap.length && heap[left + 1] < heap[left] ? left + 1 : left;
        if (heap[child] >= last) break;
        heap[i] = heap[child];
        i = child;
      }
      heap[i] = last;
    }
    return top;
  }
}

/**
 * The jobs' positions with every job after those it waits on (Kahn's algorithm, the lowest
 * position first), or the refusal naming a cycle: from the first job left waiting, each job's
 * first unfinished dependency until one repeats (`a → c → b → a`).
 */
function topologicalOrder(jobs, position) {
  const waits = new Array(jobs.length).fill(0);
  const dependents = jobs.map(() => []);
  jobs.forEach((job, i) => {
    for (const edge of job.after) {
      waits[i] += 1;
      dependents[position.get(edge.job)].push(i);
    }
  });
  const ready = new LowestFirst();
  waits.forEach((count, i) => {
    if (count === 0) ready.push(i);
  });
  const order = [];
  while (ready.size > 0) {
    const i = ready.pop();
    order.push(i);
    for (const d of dependents[i]) {
      waits[d] -= 1;
      if (waits[d] === 0) ready.push(d);
    }
  }
  const stuck = waits.findIndex((count) => count > 0);
  if (stuck >= 0) {
    const path = [stuck];
    const onPath = new Map([[stuck, 0]]);
    for (;;) {
      const last = path[path.length - 1];
      const next =
        jobs[last].after.map((edge) => position.get(edge.job)).find((d) => waits[d] > 0) ?? stuck;
      if (onPath.has(next)) {
        const names = [...path.slice(onPath.get(next)), next].map((i) => jobs[i].name);
        throw refuse(`the flow has a cycle: ${names.join(' → ')} (each waits on the next)`);
      }
      onPath.set(next, path.length);
      path.push(next);
    }
  }
  return order;
}

/**
 * Reads and checks a flow document: the flow, its order and each job's named options.
 * Nothing here touches a server.
 */
function prepareFlow(document, maxInputBytes = LIMITS.MAX_INPUT_BYTES, nowMs = Date.now()) {
  const flow = readFlowDocument(document);
  return { flow, ...checkFlow(flow, maxInputBytes, nowMs) };
}

/**
 * The order a checked flow's functions are written in, as layers (the functions of a layer
 * at once), as the Rust client's `write_order`: a function once every other function with
 * jobs waiting on its jobs is written, so that its jobs can name those dependents, already
 * written. When no function left qualifies (functions waiting on each other), the first of
 * those left, by bytes, is written alone. `edges` are `[dependency, dependent]` positions.
 *
 * @returns {string[][]}
 */
function writeOrder(flow, edges) {
  // For each function, the other functions whose jobs wait on its jobs.
  const waitedBy = new Map();
  for (const job of flow.jobs) if (!waitedBy.has(job.function)) waitedBy.set(job.function, new Set());
  for (const [dependency, dependent] of edges) {
    const of = flow.jobs[dependency].function;
    const by = flow.jobs[dependent].function;
    if (of !== by) waitedBy.get(of).add(by);
  }
  const written = new Set();
  let left = [...waitedBy.keys()].sort(byBytes);
  const layers = [];
  while (left.length > 0) {
    let layer = left.filter((fn) => [...waitedBy.get(fn)].every((by) => written.has(by)));
    if (layer.length === 0) layer = [left[0]];
    for (const fn of layer) written.add(fn);
    left = left.filter((fn) => !written.has(fn));
    layers.push(layer);
  }
  return layers;
}

/**
 * How a checked flow's jobs are written, as the Rust client's `write_flow` writes them: its
 * functions in the layers of `writeOrder`; for each job, the ids of its dependents whose
 * function is in an earlier layer (`dependents[i]`: written before it, they are named on it
 * with the option `dependent`); and those edges as `preset`, the keys (`pairKey`) of the
 * `[dependent, dependency]` pairs that need no `link`.
 *
 * @returns {{layers: string[][], dependents: string[][], preset: Set<string>}}
 */
function writePlan(flow, ids, position) {
  const edges = flow.jobs.flatMap((job, i) => job.after.map((edge) => [position.get(edge.job), i]));
  const layers = writeOrder(flow, edges);
  const layerOf = new Map(layers.flatMap((layer, n) => layer.map((fn) => [fn, n])));
  const dependents = flow.jobs.map(() => []);
  const preset = new Set();
  for (const [dependency, dependent] of edges) {
    const of = flow.jobs[dependency].function;
    const by = flow.jobs[dependent].function;
    if (of !== by && layerOf.get(by) < layerOf.get(of)) {
      dependents[dependency].push(ids[dependent]);
      preset.add(pairKey(ids[dependent], ids[dependency]));
    }
  }
  return { layers, dependents, preset };
}

/** The key of a `[dependent, dependency]` pair of job ids in `writePlan`'s `preset`. */
function pairKey(dependent, dependency) {
  return `${dependent} ${dependency}`;
}

/**
 * The named options that place job `i` of a checked flow: its edges to jobs of the flow
 * (`after`, and `after_ignore` / `after_continue` for their policies), its `dependents`
 * written already (`dependent`, repeating; see `writePlan`), its reserved `number` and the
 * `flow` id; `named` (its other options) first.
 */
function placedOptions(flow, i, named, ids, position, flowId, dependents = []) {
  const job = flow.jobs[i];
  const out = [...named];
  for (const edge of job.after) out.push('after', ids[position.get(edge.job)]);
  for (const edge of job.after) {
    const option = POLICY_OPTION[edge.onFailure];
    if (option) out.push(option, ids[position.get(edge.job)]);
  }
  for (const dependent of dependents) out.push('dependent', dependent);
  out.push('number', String(ids[i].slice(ids[i].lastIndexOf(':') + 1)), 'flow', String(flowId));
  return out;
}

/**
 * The flow as its record keeps it (`wg:{flows}:records`, after `CREATED_MS|`): its name and
 * its jobs in `order`, each with its id and edges (`after` left out when it has none), as
 * the Rust client writes it.
 */
function flowRecord(flow, order, ids) {
  return JSON.stringify({
    name: flow.name,
    jobs: order.map((i) => {
      const job = flow.jobs[i];
      const stored = { name: job.name, id: ids[i] };
      if (job.after.length > 0) {
        stored.after = job.after.map((edge) => ({ job: edge.job, on_failure: edge.onFailure }));
      }
      return stored;
    }),
  });
}

/**
 * A flow id: a whole number above 0 (a number, or its decimal text), as the decimal text the
 * calls take. Throws BadInputError.
 */
function flowId(id) {
  const text = typeof id === 'number' && Number.isSafeInteger(id) ? String(id) : id;
  if (typeof text !== 'string' || !/^[0-9]{1,20}$/.test(text) || /^0+$/.test(text)) {
    throw new BadInputError(`invalid flow id ${JSON.stringify(id)}: a flow id is a whole number above 0`);
  }
  const canonical = text.replace(/^0+/, '');
  if (BigInt(canonical) > 18446744073709551615n) {
    throw new BadInputError(`invalid flow id ${JSON.stringify(id)}: a flow id is a whole number above 0`);
  }
  return canonical;
}

/**
 * A record as `flow_get` answers it (`CREATED_MS|JSON`): `{createdMs, name, jobs: [{name,
 * id, after: [{job, onFailure}]}]}`. Throws WasmgearError for one that does not read.
 */
function parseFlowRecord(id, raw) {
  const corrupt = (reason) => new WasmgearError(`flow ${id} has a corrupt record: ${reason}`);
  const text = String(raw);
  const bar = text.indexOf('|');
  if (bar < 0) throw corrupt('it has no creation time');
  const created = text.slice(0, bar);
  if (!/^[0-9]+$/.test(created)) throw corrupt(`its creation time ${quote(created)} is not a number`);
  let stored;
  try {
    stored = JSON.parse(text.slice(bar + 1));
  } catch (error) {
    throw corrupt(error.message);
  }
  if (!isObject(stored) || typeof stored.name !== 'string' || !Array.isArray(stored.jobs)) {
    throw corrupt('it is not an object with a name and a list of jobs');
  }
  const jobs = stored.jobs.map((job) => {
    if (!isObject(job) || typeof job.name !== 'string' || typeof job.id !== 'string') {
      throw corrupt(`a job is not {name, id, after}: ${JSON.stringify(job)}`);
    }
    let parsed;
    try {
      parsed = parseJobId(job.id);
    } catch (error) {
      throw corrupt(`job ${quote(job.name)} has id ${quote(job.id)}: ${error.message}`);
    }
    const edges = Array.isArray(job.after) ? job.after : [];
    return {
      name: job.name,
      id: parsed.id,
      after: edges.map((edge) => ({
        job: String(edge && edge.job),
        onFailure: POLICIES.includes(edge && edge.on_failure) ? edge.on_failure : 'cancel',
      })),
    };
  });
  return { createdMs: Number(created), name: stored.name, jobs };
}

/**
 * A flow's status: its record and each job's outcome (`[state, output_bytes, error]` as
 * `outcomes` answers it, in the record's order): `{id, name, createdAt, jobs: [{name, id,
 * after, state, outputBytes, error}], ended, counts, sinks}`.
 */
function flowStatus(id, record, outcomes) {
  const jobs = record.jobs.map((job, i) => {
    const [state, outputBytes, error] = outcomes[i];
    return {
      name: job.name,
      id: job.id,
      after: job.after,
      state: String(state),
      outputBytes: Number(outputBytes) || 0,
      error: error === null || error === undefined || error === false ? null : String(error),
    };
  });
  const counts = {};
  for (const state of STATE_ORDER) {
    const n = jobs.filter((job) => job.state === state).length;
    if (n > 0) counts[state] = n;
  }
  const waited = new Set(jobs.flatMap((job) => job.after.map((edge) => edge.job)));
  return {
    id: Number(id),
    name: record.name,
    createdAt: new Date(record.createdMs),
    jobs,
    ended: jobs.every(jobEnded),
    counts,
    sinks: jobs.filter((job) => !waited.has(job.name)).map((job) => job.name),
  };
}

/** Whether a flow's job has ended (or is gone). */
function jobEnded(job) {
  return job.state === 'missing' || FINAL.has(job.state);
}

module.exports = {
  FLOW_KEYS,
  MAX_OUTCOMES,
  STATE_ORDER,
  readFlowDocument,
  checkFlow,
  prepareFlow,
  writeOrder,
  writePlan,
  pairKey,
  placedOptions,
  flowRecord,
  flowId,
  parseFlowRecord,
  flowStatus,
  jobEnded,
  compactJson,
  byBytes,
};
