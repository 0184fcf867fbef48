// Type declarations of the wasmgear client (hand-written; the package is plain JavaScript).

/// <reference types="node" />

/** A job's state. */
export type JobState =
  | 'queued'
  | 'scheduled'
  | 'waiting'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'cancelled'
  /** Not started by its deadline (`expiresInMs`/`expiresAt`): it never ran. */
  | 'expired';

/** A job's input: bytes, or text (sent as UTF-8). */
export type Input = Buffer | Uint8Array | string;

/**
 * What becomes of a job when one of its dependencies fails, is cancelled or is gone:
 * `cancel` it (the default), `ignore` the failure (the job runs when its other dependencies
 * let it, and reads that one as failed), or `continue` (the job runs once every dependency
 * has ended, however).
 */
export type OnFailure = 'cancel' | 'ignore' | 'continue';

/** How a job is to be run; every option may be left out. */
export interface EnqueueOptions {
  /** -1000..1000 or low (-10), normal (0), high (10); higher runs first. Default 0. */
  priority?: number | 'low' | 'normal' | 'high';
  /** Milliseconds before the job may run (0..10 years). Not together with `at`. */
  delayMs?: number;
  /** The time before which the job may not run (on Redis' clock); not in the past. */
  at?: Date;
  /** Attempts in all, retries included (1..1000). Default: the serving plugin's. */
  attempts?: number;
  /** How long one attempt may run, ms (1 ms..10 years). Default: the serving plugin's. */
  timeoutMs?: number;
  /** How long the finished job is kept, ms (1 s..10 years). Default 25 hours. */
  retentionMs?: number;
  /** How long the job is kept if it failed, ms (0..10 years). Default 7 days. */
  failedRetentionMs?: number;
  /** While an unfinished job of the function holds this key, that job is returned instead. 1..200 bytes, no control characters. */
  uniq?: string;
  /** Up to 32 tags, each 1..200 bytes, no control characters. */
  tags?: string[];
  /** Up to 10 000 job ids (of any function) that must succeed first. */
  after?: string[];
  /** The failure policy of some of `after` (dependency id → policy); the others' is `cancel`. */
  onFailure?: Record<string, OnFailure>;
  /**
   * The job's group (a tenant, customer or document key): 1..200 bytes of printable ASCII
   * without spaces, `"`, `\` or `|`. The function's ready jobs are leased round robin across
   * their groups, each within its own limits (`configureGroup`).
   */
  group?: string;
  /**
   * With `uniq`: once the key's job has succeeded, the key goes on answering with it for
   * this long, ms (1 ms..10 years): the same work is not done twice within the window.
   * At most one of `uniqForMs`, `debounceMs` and `throttle`.
   */
  uniqForMs?: number;
  /**
   * With `uniq`: the job waits this long, ms (1 ms..10 years); enqueued again with the key
   * before it has started, that job takes the new input and waits this long again (the last
   * of a burst runs). Once it has started, a new job is made. Not with `delayMs` or `at`.
   */
  debounceMs?: number;
  /**
   * With `uniq`: at most `limit` jobs are made with the key per `intervalMs` (a window opened
   * by the first); beyond, the latest made answers (`created` false). The key does not join
   * unfinished jobs then.
   */
  throttle?: RateLimit;
  /**
   * A job not started within this many ms (1 ms..10 years, from now on Redis' clock) ends
   * `expired` (error class `expired`) and never runs; `retry` runs it without the deadline.
   * Not together with `expiresAt`.
   */
  expiresInMs?: number;
  /** The same as a time (a Date or ms since the epoch); one Redis' clock has passed is refused (ConflictError). */
  expiresAt?: Date | number;
  /**
   * The W3C trace context the job carries (`00-<32 hex trace id>-<16 hex span id>-<2 hex
   * flags>`, lower case, the ids not all zeros; a later version is kept as version 00): each
   * attempt's `process FUNCTION` span of a worker that exports spans is its child. Default:
   * the client's `send FUNCTION` span's when `@opentelemetry/api` is installed, else the
   * active context's, else none (README, "Tracing (OpenTelemetry)").
   */
  traceparent?: string;
  /** The W3C tracestate that goes with `traceparent` (only with it): at most 512 bytes of printable ASCII. */
  tracestate?: string;
}

/** One job of `enqueueMany`: its input, and its options beside it. */
export interface BatchItem extends EnqueueOptions {
  input: Input;
}

/** A job handed to `enqueue`. */
export interface Enqueued {
  /** `FUNCTION:N`. */
  id: string;
  /**
   * false: the uniq key answered with another job, whose id is returned: an unfinished one,
   * one within its `uniqForMs` window, one not started yet (`debounceMs`) or the latest made
   * (`throttle`).
   */
  created: boolean;
}

/** A progress report. `done` and `total` lose precision beyond 2^53 (the record holds them exactly). */
export interface Progress {
  /** Orders the job's reports over all its attempts. */
  seq: number;
  done: number;
  /** 0 when unknown. */
  total: number;
  message?: string;
}

/**
 * The checkpoint a job keeps (the bytes its attempts saved last to resume from), as its
 * record tells of it; the bytes are read with `Client.checkpoint`.
 */
export interface CheckpointInfo {
  /** Its size. */
  bytes: number;
  /** When it was saved (Redis' clock). */
  savedAt: Date;
}

/** One ended attempt. */
export interface Attempt {
  attempt: number;
  worker: string | null;
  startedAt: Date | null;
  endedAt: Date | null;
  /** `succeeded`, the error class, `lease-lost` or `cancelled`. */
  outcome: string;
  message: string | null;
  /** The content hash prefix of the plugin that ran it. */
  version: string | null;
}

/** A job's record as the queue answered it (PROTOCOL.md, "The job record"), by the protocol's field names. */
export interface JobRecord {
  /** The W3C traceparent the job carries (version 00), when it carries one. */
  trace?: string;
  /** The W3C tracestate that came with it, if any. */
  tracestate?: string;
  [field: string]: unknown;
}

/** Everything known about a job (the record `wg2_get` answers, and its output). */
export interface Job {
  id: string;
  function: string;
  number: number;
  state: JobState;
  /** Whether the state is succeeded, failed, cancelled or expired. */
  final: boolean;
  priority: number;
  /** Attempts started so far. */
  attempt: number;
  /** Attempts allowed in all (0 until the first lease when left to the plugin's default). */
  maxAttempts: number;
  /** The last progress report of the current attempt. */
  progress: Progress | null;
  /** Progress reports over all attempts. */
  progressSeq: number;
  /** The checkpoint it keeps for its next attempt to resume from, null when none (gone once it succeeds). */
  checkpoint: CheckpointInfo | null;
  /** The last error: `class` is the failure group. */
  error: { class: string; message: string } | null;
  /** The output of a succeeded job. */
  output: Buffer | null;
  timeoutMs: number;
  retentionMs: number | null;
  failedRetentionMs: number | null;
  uniq: string | null;
  tags: string[];
  /** The jobs it had to wait for. */
  after: string[];
  /** Those of them not yet succeeded. */
  waitingOn: string[];
  /** The jobs waiting for it. */
  dependents: string[];
  createdAt: Date | null;
  runAt: Date | null;
  notBefore: Date | null;
  startedAt: Date | null;
  finishedAt: Date | null;
  cancelRequestedAt: Date | null;
  /** The deadline to start by (`expiresInMs`/`expiresAt`), null without one. */
  expiresAt: Date | null;
  history: Attempt[];
  /** The record as the queue answered it (PROTOCOL.md, "The job record"). */
  record: JobRecord;
}

export interface WaitOptions {
  /** Give up after this long (WaitTimeoutError); the job goes on. Default: no limit. */
  timeoutMs?: number;
  /** Each progress report, in `seq` order, never one older than the last, per job. */
  onProgress?: (progress: Progress, id: string) => void;
}

/** How `retry` runs a job again. */
export interface RetryOptions {
  /** Drop the job's checkpoint, so that it starts over rather than resuming from it. Default false. */
  fresh?: boolean;
}

/** What `cancel` did. */
export interface CancelOutcome {
  /** As `wasmgear cancel` says it. cancelled: at once; stopping: its worker was asked to stop it (it ends cancelled); already-ended: nothing changed. */
  outcome: 'cancelled' | 'stopping' | 'already-ended';
  state: JobState;
}

/** One function's queue, as `wasmgear queues` shows it. */
export interface QueueOverview {
  function: string;
  /** Ready to run: the jobs without a group and those with one. */
  queued: number;
  scheduled: number;
  running: number;
  waiting: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  /** Live workers serving the function. */
  workers: number;
  paused: boolean;
}

/** An event as published on `wg:{F}:events` (PROTOCOL.md, "Events"), with its function. */
export interface QueueEvent {
  function: string;
  event: 'create' | 'start' | 'progress' | 'checkpoint' | 'retry' | 'finish' | 'ready' | 'config' | 'cancel' | string;
  id: string;
  attempt?: number;
  seq?: number;
  done?: string | number;
  total?: string | number;
  message?: string;
  /** A `checkpoint`: the size of the checkpoint the running job saved. */
  bytes?: number;
  at_ms?: number;
  state?: JobState;
  /** A `finish` of a job a client waits on (`wait`, through `wg2_watch`): its record, as `wg2_get` answers it. */
  record?: JobRecord;
  /** With `record`: the job's output, when it is at most 1024 bytes of printable ASCII, tabs and line ends. */
  output?: string;
  /** With `record`: the job has an output the event does not carry (read it with `status`). */
  output_omitted?: boolean;
  [field: string]: unknown;
}

/** The events of a function (or of all), as an async iterator. */
export interface EventStream extends AsyncIterableIterator<QueueEvent> {
  /** Resolves true once Redis confirmed the subscription (false: not now; it is made when the connection is back). */
  ready: Promise<boolean>;
  /** Ends the stream. */
  close(): void;
}

/** An entry of a flow job's `after`: a job's name in the flow (or the id `FUNCTION:N` of a job outside it), alone or with its policy. */
export type FlowAfter = string | { job: string; on_failure?: OnFailure | null };

/** One job of a flow document (the HTTP API's job fields, as it names them). */
export interface FlowJobDocument {
  /** The function that runs it. */
  function: string;
  /** The input as text (UTF-8), or bytes. At most one of input, input_base64 and input_json. */
  input?: string | Buffer | Uint8Array;
  /** The input as base64. */
  input_base64?: string;
  /** The input as any JSON value: the job gets its compact text (object keys sorted). */
  input_json?: unknown;
  priority?: number;
  delay_ms?: number;
  /** The time before which it may not run, ms since the epoch. Not with `delay_ms`. */
  at_ms?: number;
  attempts?: number;
  timeout_ms?: number;
  retention_ms?: number;
  failed_retention_ms?: number;
  tags?: string[];
  /** Its group (see `EnqueueOptions.group`). */
  group?: string;
  /** The jobs it waits on. */
  after?: FlowAfter[];
  /** The trace context it carries (see `EnqueueOptions.traceparent`); default: the client's. */
  traceparent?: string;
  /** The tracestate that goes with `traceparent` (only with it). */
  tracestate?: string;
}

/** A flow: named jobs (1 to 200 letters, digits, `_`, `-`, `.` each) and the jobs each waits on. At most 10 000 jobs, no cycle. */
export interface FlowDocument {
  /** 1 to 200 bytes, no control characters. */
  name: string;
  jobs: Record<string, FlowJobDocument>;
}

/** What `submitFlow` wrote. */
export interface SubmittedFlow {
  /** The flow's id. */
  id: number;
  /** Each job's id by its name. */
  jobs: Record<string, string>;
}

/** An edge of a flow: the job waited on (by name), and the waiting job's policy when it fails. */
export interface FlowEdge {
  job: string;
  onFailure: OnFailure;
}

/** One job of a flow, as it stands. */
export interface FlowJobStatus {
  /** Its name in the flow. */
  name: string;
  /** `FUNCTION:N`. */
  id: string;
  /** The jobs of the flow it waits on. */
  after: FlowEdge[];
  /** `missing` when it is not kept (forgotten after its retention). */
  state: JobState | 'missing';
  /** The size of its output, once it succeeded. */
  outputBytes: number;
  /** The message it failed or was cancelled with. */
  error: string | null;
}

/** A flow and how each of its jobs stands. */
export interface FlowStatus {
  id: number;
  name: string;
  /** When it was submitted (Redis' clock). */
  createdAt: Date;
  /** Its jobs, every one after those it waits on. */
  jobs: FlowJobStatus[];
  /** Whether every job has ended (or is gone). */
  ended: boolean;
  /** How many jobs are in each state (only those with some), in the order waiting, scheduled, queued, running, succeeded, failed, cancelled, expired, missing. */
  counts: Partial<Record<JobState | 'missing', number>>;
  /** The names of the jobs no other job of the flow waits on (its results), in order. */
  sinks: string[];
}

export interface WaitFlowOptions {
  /** Give up after this long (WaitTimeoutError with `flow`); the jobs go on. Default: no limit. */
  timeoutMs?: number;
}

/** A batch's callback: a job of `function`, enqueued once, whose input is the batch's outcome (BatchCallbackInput). */
export interface BatchCallback {
  /** The function of the callback job. */
  function: string;
  /** Any JSON value, passed on in the callback's input as `data`. */
  data?: unknown;
}

/** A batch's name and callbacks (`openBatch`, `batch`). */
export interface BatchOptions {
  /** Shown with its status, and passed on in the callbacks' input. Default ''. */
  name?: string;
  /** Enqueued once every job has succeeded. */
  onSuccess?: BatchCallback | null;
  /** Enqueued once every job has ended, however. */
  onComplete?: BatchCallback | null;
}

/** One job of a batch: its function, its input, and `enqueue`'s options (but `uniq` and the options on it: a batch's jobs are always new). */
export interface BatchJob {
  function: string;
  input?: Input;
  options?: Omit<EnqueueOptions, 'uniq' | 'uniqForMs' | 'debounceMs' | 'throttle'>;
}

/** What `batch` wrote. */
export interface SubmittedBatch {
  /** The batch's id (hex digits). */
  id: string;
  /** Its jobs' ids, in the order given. */
  jobs: string[];
}

/** How a batch stands. */
export interface BatchStatus {
  id: string;
  name: string;
  /** Whether jobs can still be added (until `closeBatch`). */
  open: boolean;
  /** Its jobs. */
  total: number;
  /** Those not counted as ended yet. */
  pending: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  /** The ids of the jobs that failed. */
  failedIds: string[];
  /** The ids of the jobs that were cancelled. */
  cancelledIds: string[];
  /** null (not due, or none asked for), `due`, or the callback job's id. */
  onSuccess: string | null;
  /** As `onSuccess`. */
  onComplete: string | null;
  /** When it was opened (Redis' clock). */
  createdAt: Date;
  /** When its last job ended with the batch closed, if it has. */
  endedAt: Date | null;
}

/** The input of a batch's callback job (JSON; the protocol's field names). */
export interface BatchCallbackInput {
  /** The batch's id. */
  batch: string;
  name: string;
  callback: 'success' | 'complete';
  total: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  failed_ids: string[];
  cancelled_ids: string[];
  /** The callback's `data`, null when it had none. */
  data: unknown;
}

/** A rate limit: at most `limit` leases per `intervalMs`, over all workers (as `EnqueueOptions.throttle`: at most `limit` jobs made per `intervalMs`). */
export interface RateLimit {
  /** 1 or more. */
  limit: number;
  /** 1 ms..10 years. */
  intervalMs: number;
}

/** Changes to a function's settings (`configure`): a setting left out is not changed, `null` clears it. */
export interface FunctionSettings {
  /** Workers lease none of its jobs (enqueueing goes on). */
  paused?: boolean;
  /** The most of its jobs running at once, over all workers (1 or more). */
  concurrency?: number | null;
  /** The most of its leases per interval, over all workers. */
  rateLimit?: RateLimit | null;
  /** The most finished jobs kept (default 50 000). */
  keepFinished?: number | null;
  /** Each group's most jobs running at once, unless the group has its own (1: each group is a sequence). */
  groupConcurrency?: number | null;
  /** Each group's most leases per interval, unless the group has its own. */
  groupRateLimit?: RateLimit | null;
  /**
   * How many replicas must confirm each enqueue of its jobs (and each completion) before the
   * call reports success, 1..16 (a client's own `minReplicas` may ask for more); null asks for none.
   */
  minReplicas?: number | null;
  /**
   * It stores only encrypted input: an enqueue of a plain input is refused before anything is
   * written (a client with a key file seals it); its workers seal its output, error, log and
   * checkpoint. `false` takes plain input again.
   */
  encrypt?: boolean;
}

/** A function's settings, shared by all workers (null where it has none: the default applies). */
export interface FunctionConfig {
  paused: boolean;
  concurrency: number | null;
  rateLimit: RateLimit | null;
  keepFinished: number | null;
  groupConcurrency: number | null;
  groupRateLimit: RateLimit | null;
  /** The replicas that must confirm each enqueue of its jobs and each completion (null: none asked). */
  minReplicas: number | null;
  /** It stores only encrypted input (`configure(fn, {encrypt: true})`, `wasmgear config F --encrypt`). */
  encrypt: boolean;
}

/** Changes to a group's own settings (`configureGroup`): a setting left out is not changed, `null` clears it (the function's default applies again). */
export interface GroupSettings {
  /** The most of its jobs running at once, over all workers (1: a sequence, one at a time in order). */
  concurrency?: number | null;
  /** The most of its leases per interval. */
  rateLimit?: RateLimit | null;
  /** Workers lease none of its jobs (the other groups go on). */
  paused?: boolean;
}

/** A group's own settings (null where it has none: the function's `groupConcurrency` / `groupRateLimit` applies). */
export interface GroupConfig {
  concurrency: number | null;
  rateLimit: RateLimit | null;
  paused: boolean;
}

/** One group of a function, as `groups` lists it. */
export interface GroupInfo {
  /** The group key. */
  group: string;
  /** Its jobs ready to run. */
  ready: number;
  /** Its jobs holding a slot: running (and a sequence's job waiting out a retry's backoff). */
  running: number;
  /** Its own settings. */
  config: GroupConfig;
  /** Until when it waits for its rate window (Redis' clock), or null. */
  rateLimitedUntil: Date | null;
}

export interface GroupsOptions {
  /** List at most this many groups, the deepest first (1..1000). Default 20. */
  limit?: number;
  /** List this group only. */
  group?: string | null;
}

/** A function's groups, the deepest (most ready jobs) first. */
export interface GroupsOverview {
  /** How many groups have ready jobs, running jobs or their own settings. */
  groups: number;
  /** More groups than the queue looks at in one call exist; `groups` counts those it did. */
  truncated: boolean;
  /** Ready jobs without a group (they take their turns as one group). */
  ungroupedReady: number;
  /** The deepest groups, at most `limit`. */
  listed: GroupInfo[];
}

export interface ConnectOptions {
  /** Use Redis Cluster (default: asked of the server with `INFO cluster`). */
  cluster?: boolean;
  /** How long connecting may take, ms (default 5000). */
  connectTimeoutMs?: number;
  /** How long one command may wait for its reply, ms (default 10000). */
  commandTimeoutMs?: number;
  /** The largest input accepted, bytes (default 16 MiB). */
  maxInputBytes?: number;
  /** With a rediss:// (or rediss+sentinel://) URL: Node's TLS options, e.g. `{ca}` for a private certificate authority. */
  tls?: import('node:tls').ConnectionOptions;
  /**
   * How many replicas must confirm each write of jobs (enqueue, enqueueMany, flows, batches)
   * before it resolves, 0..16 (default 0: none; a function's own `minReplicas` setting may
   * ask for more): `WAIT` after the write, which is sent again (same call id: written once)
   * while they fall short, 3 sends in all; then NotReplicatedError.
   */
  minReplicas?: number;
  /** How long the replicas are waited for per send, ms (>= 1, less than `commandTimeoutMs`; default 1000, or just under a shorter `commandTimeoutMs`). */
  minReplicasTimeoutMs?: number;
  /**
   * Encrypted job data: a key file (`ID BASE64KEY` a line, the first seals, every one opens;
   * `wasmgear keys new FILE ID` adds one), read before connecting; default
   * WASMGEAR_ENCRYPTION_KEY_FILE, `null` reads none. The inputs of functions that store only
   * encrypted input are sealed, each bound to its job; what is read of sealed jobs (output,
   * error messages, log, input, checkpoint) is opened.
   */
  encryptionKeyFile?: string | null;
  /** With a key file: seal every input written, whatever the function's config (default WASMGEAR_ENCRYPT_ALL=1). */
  encryptAll?: boolean;
}

export class Client {
  private constructor();
  /**
   * Connects to `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (`rediss://` for TLS), or to the
   * primary Redis Sentinel names, followed when it moves:
   * `redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[?db=N&sentinel_user=U&sentinel_password=P]`
   * (`rediss+sentinel://` for TLS); loads the protocol library if needed.
   */
  static connect(url: string, opts?: ConnectOptions): Promise<Client>;
  /** Whether the server is a Redis Cluster. */
  readonly isCluster: boolean;
  /** Enqueues one job of `fn`. */
  enqueue(fn: string, input: Input, options?: EnqueueOptions): Promise<Enqueued>;
  /** Enqueues many jobs of `fn`, all checked first, in calls of 1000 (each all or nothing). */
  enqueueMany(fn: string, items: Array<Input | BatchItem>): Promise<Enqueued[]>;
  /** Everything known about a job; NotFoundError when there is none. */
  status(id: string): Promise<Job>;
  /** The job's log (each attempt's lines, the newest 256 KiB). */
  logs(id: string): Promise<string>;
  /**
   * Waits for one job: resolves with it if it succeeded; rejects JobFailedError, JobCancelledError or WaitTimeoutError.
   * Its first read (`wg2_watch`) marks the job as waited on, so that its `finish` event carries its final status
   * (the output when small text) and the wait needs no further read.
   */
  wait(id: string, options?: WaitOptions): Promise<Job>;
  /** Waits for every job: resolves with them (in order) if all succeeded; else rejects (failed > timed out > cancelled). */
  wait(ids: string[], options?: WaitOptions): Promise<Job[]>;
  /** The events of `fn`, or of every function. */
  events(fn?: string): EventStream;
  /** Cancels a job, and its unfinished children and theirs; resolves the job's own outcome. */
  cancel(id: string): Promise<CancelOutcome>;
  /**
   * Runs a failed or cancelled job again, resuming from its checkpoint if it keeps one
   * (`{fresh: true}`: dropped, it starts over); false when it had not ended so.
   */
  retry(id: string, options?: RetryOptions): Promise<boolean>;
  /** The checkpoint a job keeps (the bytes its attempts saved last to resume from), null when none. */
  checkpoint(id: string): Promise<Buffer | null>;
  /** A job's input (opened with the client's keys when it was sealed), null once the job is forgotten. */
  input(id: string): Promise<Buffer | null>;
  /** Submits a flow, checked whole before anything is written (BadInputError when refused); resolves its id and its jobs' ids. */
  submitFlow(document: FlowDocument | string): Promise<SubmittedFlow>;
  /** A flow and how its jobs stand; NotFoundError when there is none. */
  flow(id: number | string): Promise<FlowStatus>;
  /** Cancels every unfinished job of a flow; resolves how many there were. */
  cancelFlow(id: number | string): Promise<number>;
  /** Runs a flow's failed and cancelled jobs again, dependencies first; resolves their ids. */
  retryFlow(id: number | string): Promise<string[]>;
  /** Waits until every job of a flow has ended, however; resolves its status then. */
  waitFlow(id: number | string, options?: WaitFlowOptions): Promise<FlowStatus>;
  /** Opens a batch; resolves its id. Jobs are added with `addToBatch` until `closeBatch`. */
  openBatch(options?: BatchOptions): Promise<string>;
  /** Adds jobs of any functions to an open batch, all checked first; resolves their ids. NotFoundError (no such batch), ConflictError (closed). */
  addToBatch(batchId: string, jobs: BatchJob[]): Promise<string[]>;
  /** Closes a batch: its callbacks come once all its jobs have ended. NotFoundError when there is none. */
  closeBatch(batchId: string): Promise<void>;
  /** Opens a batch, adds the jobs and closes it; resolves its id and its jobs' ids. */
  batch(jobs: BatchJob[], options?: BatchOptions): Promise<SubmittedBatch>;
  /** How a batch stands; NotFoundError when there is none. */
  batchStatus(batchId: string): Promise<BatchStatus>;
  /** Every known function's queue, sorted by name. */
  queues(): Promise<QueueOverview[]>;
  /** A function's settings. */
  config(fn: string): Promise<FunctionConfig>;
  /** Changes a function's settings (left out: unchanged; null: cleared); resolves them afterwards. */
  configure(fn: string, settings?: FunctionSettings): Promise<FunctionConfig>;
  /** Changes a group's own settings (left out: unchanged; null: cleared); resolves them afterwards. */
  configureGroup(fn: string, group: string, settings?: GroupSettings): Promise<GroupConfig>;
  /** A function's groups, the deepest first. */
  groups(fn: string, options?: GroupsOptions): Promise<GroupsOverview>;
  /** Ends waits and event streams and closes the connections. */
  close(): Promise<void>;
}

/**
 * The limits options are checked against, read from the shipped protocol/manifest.json
 * (the same the Rust client, the queue's library and the HTTP API hold a job to).
 */
export const LIMITS: Readonly<{
  MAX_FUNCTION_NAME_LEN: number;
  MAX_INPUT_BYTES: number;
  MIN_PRIORITY: number;
  MAX_PRIORITY: number;
  /** The priority `low` stands for. */
  PRIORITY_LOW: number;
  /** The priority `high` stands for. */
  PRIORITY_HIGH: number;
  MAX_ATTEMPTS: number;
  MAX_TAGS: number;
  MAX_DEPENDENCIES: number;
  /** The most jobs a flow may have. */
  MAX_FLOW_JOBS: number;
  /** The longest name of a flow or of a flow's job, bytes. */
  MAX_FLOW_NAME_BYTES: number;
  /** The most jobs a batch may have. */
  MAX_BATCH_JOBS: number;
  MAX_KEY_BYTES: number;
  MAX_DURATION_MS: number;
  MIN_RETENTION_MS: number;
  DEFAULT_RETENTION_MS: number;
  DEFAULT_FAILED_RETENTION_MS: number;
  MAX_CHILDREN: number;
  CONNECT_TIMEOUT_MS: number;
  RESPONSE_TIMEOUT_MS: number;
  WAIT_POLL_MS: number;
  WAIT_RECHECK_MS: number;
  /** The most jobs one `enqueue` call of `enqueueMany` carries. */
  ENQUEUE_BATCH: number;
  /** The most replicas `minReplicas` may ask for. */
  MAX_MIN_REPLICAS: number;
  /** The default of `minReplicasTimeoutMs`. */
  MIN_REPLICAS_TIMEOUT_MS: number;
  /** The longest `tracestate` a job carries, bytes. */
  MAX_TRACESTATE_BYTES: number;
}>;

/** Splits a job id `FUNCTION:N`; throws BadInputError when it is not one. */
export function parseJobId(id: string): { id: string; function: string; number: number };
/** Returns the function name if valid; throws BadInputError when it is not. */
export function checkFunction(name: string): string;

/** The base of this library's errors; `exitCode` is the `wasmgear` CLI's for the same trouble. */
export class WasmgearError extends Error {
  readonly exitCode: number;
}
/** Bad input (exit code 2); nothing was written. */
export class BadInputError extends WasmgearError {
  readonly exitCode: 2;
}
/**
 * A well-formed request the queue's state refuses (exit code 2, HTTP 409); nothing was
 * written: a time to run at the queue's clock has passed, a dependency gone, failed or
 * cancelled.
 */
export class ConflictError extends BadInputError {}
/** No such job, flow or batch (exit code 5). */
export class NotFoundError extends WasmgearError {
  readonly exitCode: 5;
  /** The job not found. */
  readonly id?: string;
  /** The flow not found. */
  readonly flow?: number;
  /** The batch not found. */
  readonly batch?: string;
}
/** Redis cannot be reached (exit code 6). */
export class UnreachableError extends WasmgearError {
  readonly exitCode: 6;
}
/** A waited-for job failed (exit code 1). */
export class JobFailedError extends WasmgearError {
  readonly exitCode: 1;
  /** The (first) failed job. */
  readonly job: Job;
  /** Per id waited for: its final Job, or its wait's error. */
  readonly results: Array<Job | WasmgearError>;
}
/** A waited-for job was cancelled (exit code 3). */
export class JobCancelledError extends WasmgearError {
  readonly exitCode: 3;
  readonly job: Job;
  readonly results: Array<Job | WasmgearError>;
}
/** A wait ran out of time (exit code 4); the job goes on. */
export class WaitTimeoutError extends WasmgearError {
  readonly exitCode: 4;
  /** The job waited for (for a flow: the one it was waiting for when the time ran out). */
  readonly id: string;
  readonly results?: Array<Job | WasmgearError>;
  /** For `waitFlow`: the flow. */
  readonly flow?: number;
}
/**
 * A write of jobs asked to be confirmed by replicas (`minReplicas`, the client's or the
 * function's, whichever is more), and fewer confirmed it within `timeoutMs`, even when sent
 * again (exit code 6, as for Redis out of reach). The primary has it, written once; if the
 * primary fails now it may be lost. It is safe to send again.
 */
export class NotReplicatedError extends WasmgearError {
  readonly exitCode: 6;
  /** The write: `the enqueue of a job of F`, `the enqueue of N jobs of F`. */
  readonly what: string;
  /** How many replicas were asked for. */
  readonly wanted: number;
  /** How many confirmed it. */
  readonly confirmed: number;
  /** How long they were waited for (per send), ms. */
  readonly timeoutMs: number;
}
