// Compiled, never run (run-tests: `tsc --noEmit -p test-support`): every export of index.d.ts
// used the way README.md says to, so a declaration that drifts from the documented usage fails
// the type check. test/units.test.js checks that each export of index.js is named here.

import {
  Client,
  LIMITS,
  parseJobId,
  checkFunction,
  WasmgearError,
  BadInputError,
  ConflictError,
  NotFoundError,
  UnreachableError,
  JobFailedError,
  JobCancelledError,
  WaitTimeoutError,
  NotReplicatedError,
} from '..';
import type {
  JobState,
  Input,
  EnqueueOptions,
  BatchItem,
  Enqueued,
  Progress,
  Attempt,
  CheckpointInfo,
  Job,
  JobRecord,
  WaitOptions,
  RetryOptions,
  CancelOutcome,
  QueueOverview,
  QueueEvent,
  EventStream,
  ConnectOptions,
  OnFailure,
  FlowAfter,
  FlowJobDocument,
  FlowDocument,
  SubmittedFlow,
  FlowEdge,
  FlowJobStatus,
  FlowStatus,
  WaitFlowOptions,
  BatchCallback,
  BatchOptions,
  BatchJob,
  SubmittedBatch,
  BatchStatus,
  BatchCallbackInput,
  RateLimit,
  FunctionSettings,
  FunctionConfig,
  GroupSettings,
  GroupConfig,
  GroupInfo,
  GroupsOptions,
  GroupsOverview,
} from '..';
import { trace } from '@opentelemetry/api';

/** true when A and B are the same type (not merely assignable one way). */
type Equals<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function exact<A, B>(proof: Equals<A, B>): void {
  void proof;
}

// The documented value sets.
exact<JobState, 'queued' | 'scheduled' | 'waiting' | 'running' | 'succeeded' | 'failed' | 'cancelled' | 'expired'>(true);
exact<CancelOutcome['outcome'], 'cancelled' | 'stopping' | 'already-ended'>(true);
exact<Input, Buffer | Uint8Array | string>(true);
exact<OnFailure, 'cancel' | 'ignore' | 'continue'>(true);
exact<FlowJobStatus['state'], JobState | 'missing'>(true);

/** What `cancel` says, for each outcome `wasmgear cancel` has (and no other). */
function describe(result: CancelOutcome): string {
  switch (result.outcome) {
    case 'cancelled':
      return 'cancelled at once';
    case 'stopping':
      return `its worker was asked to stop it (${result.state})`;
    case 'already-ended':
      return `it had already ended ${result.state}`;
    default: {
      const unknown: never = result.outcome;
      return unknown;
    }
  }
}

async function quickStart(): Promise<void> {
  // README.md's quick start, as it is written there.
  const client = await Client.connect('redis://127.0.0.1:6379');
  const { id } = await client.enqueue('echo', 'hello');
  console.log((await client.wait(id, { timeoutMs: 30000 })).output!.toString());
  await client.close();
}

async function everyCall(ca: Buffer): Promise<void> {
  const options: ConnectOptions = {
    cluster: false,
    connectTimeoutMs: 5000,
    commandTimeoutMs: 10000,
    maxInputBytes: 16 << 20,
    tls: { ca },
  };
  const client: Client = await Client.connect('rediss://user:secret@127.0.0.1:6380/0', options);
  const cluster: boolean = client.isCluster;

  const jobOptions: EnqueueOptions = {
    priority: 'high',
    delayMs: 1000,
    attempts: 3,
    timeoutMs: 30000,
    retentionMs: 3600000,
    failedRetentionMs: 7200000,
    uniq: 'nightly-report',
    tags: ['nightly', 'team-a'],
    after: ['fetch:7'],
  };
  const one: Enqueued = await client.enqueue('echo', Buffer.from('bytes'), jobOptions);
  await client.enqueue('echo', new Uint8Array([1, 2, 3]), { priority: -5, at: new Date(Date.now() + 60000) });
  await client.enqueue('echo', 'text');
  // @ts-expect-error an unknown option is refused
  await client.enqueue('echo', 'x', { prio: 3 });
  // @ts-expect-error priority is a number or low/normal/high
  await client.enqueue('echo', 'x', { priority: 'urgent' });
  // @ts-expect-error `at` is a Date
  await client.enqueue('echo', 'x', { at: Date.now() + 60000 });
  const created: boolean = one.created;
  // Keys that outlive their job (each with uniq, one at most).
  await client.enqueue('report', 'june', { uniq: 'report-06', uniqForMs: 3600000 });
  await client.enqueue('reindex', 'doc 7', { uniq: 'doc-7', debounceMs: 5000 });
  const perMinute: RateLimit = { limit: 2, intervalMs: 60000 };
  await client.enqueue('notify', 'hi', { uniq: 'user-9', throttle: perMinute });
  await client.enqueueMany('notify', [{ input: 'a', uniq: 'user-9', throttle: { limit: 2, intervalMs: 60000 } }]);
  // @ts-expect-error a throttle is {limit, intervalMs}
  await client.enqueue('notify', 'hi', { uniq: 'user-9', throttle: [2, 60000] });
  await client.enqueue('notify', 'hi', { expiresInMs: 60000 });
  await client.enqueue('notify', 'hi', { expiresAt: new Date(Date.now() + 60000) });
  await client.enqueue('notify', 'hi', { expiresAt: Date.now() + 60000 });
  // @ts-expect-error expiresAt is a Date or ms
  await client.enqueue('notify', 'hi', { expiresAt: '2030-01-01' });
  // @ts-expect-error durations are ms numbers
  await client.enqueue('reindex', 'doc 7', { uniq: 'doc-7', debounceMs: '5s' });

  const item: BatchItem = { input: 'with options', priority: 'low', tags: ['bulk'] };
  const many: Enqueued[] = await client.enqueueMany('echo', ['a', Buffer.from('b'), item, { input: 'c' }]);

  const job: Job = await client.status(one.id);
  const state: JobState = job.state;
  const final: boolean = job.final;
  const counts: number[] = [job.number, job.priority, job.attempt, job.maxAttempts, job.progressSeq, job.timeoutMs];
  const progress: Progress | null = job.progress;
  const fraction = progress === null ? 0 : progress.done / (progress.total || 1);
  const message: string | undefined = progress?.message;
  const failure: string | undefined = job.error?.class ?? job.error?.message;
  const output: string | undefined = job.output?.toString('utf8');
  const times: Array<Date | null> = [
    job.createdAt,
    job.runAt,
    job.notBefore,
    job.startedAt,
    job.finishedAt,
    job.cancelRequestedAt,
  ];
  const retention: Array<number | null> = [job.retentionMs, job.failedRetentionMs];
  const ids: string[] = [...job.tags, ...job.after, ...job.waitingOn, ...job.dependents, job.function, job.id];
  const uniq: string | null = job.uniq;
  const history: Attempt[] = job.history;
  for (const attempt of history) {
    const fields: [number, string | null, Date | null, Date | null, string, string | null, string | null] = [
      attempt.attempt,
      attempt.worker,
      attempt.startedAt,
      attempt.endedAt,
      attempt.outcome,
      attempt.message,
      attempt.version,
    ];
    void fields;
  }
  const record: Record<string, unknown> = job.record;
  // The checkpoint it keeps: its size and when it was saved; its bytes read apart.
  const kept: CheckpointInfo | null = job.checkpoint;
  const keptFields: [number, Date] | null = kept && [kept.bytes, kept.savedAt];
  const saved: Buffer | null = await client.checkpoint(one.id);
  void [keptFields, saved];

  const log: string = await client.logs(one.id);

  const waitOptions: WaitOptions = {
    timeoutMs: 60000,
    onProgress: (report: Progress, of: string) => console.log(of, report.seq, report.done, report.total),
  };
  const waited: Job = await client.wait(one.id, waitOptions);
  const all: Job[] = await client.wait(many.map((e) => e.id), { onProgress: (p) => console.log(p.done) });
  await client.wait(one.id);
  try {
    await client.wait([one.id, many[0].id], { timeoutMs: 1000 });
  } catch (error) {
    if (error instanceof JobFailedError || error instanceof JobCancelledError) {
      const first: Job = error.job;
      const code: number = error.exitCode;
      const results: Array<Job | WasmgearError> = error.results;
      void [first, code, results];
    } else if (error instanceof WaitTimeoutError) {
      const late: string = error.id;
      const results: Array<Job | WasmgearError> | undefined = error.results;
      const four: 4 = error.exitCode;
      void [late, results, four];
    } else if (error instanceof NotFoundError) {
      const five: 5 = error.exitCode;
      const missing: string | undefined = error.id;
      void [five, missing];
    } else if (error instanceof ConflictError) {
      // Refused by the queue's state (HTTP 409), and a BadInputError all the same.
      const refused: BadInputError = error;
      const two: 2 = error.exitCode;
      void [refused, two];
    } else if (error instanceof BadInputError || error instanceof UnreachableError) {
      const code: 2 | 6 = error.exitCode;
      void code;
    } else if (error instanceof NotReplicatedError) {
      const six: 6 = error.exitCode;
      const counts: [string, number, number, number] = [error.what, error.wanted, error.confirmed, error.timeoutMs];
      void [six, counts];
    } else if (error instanceof WasmgearError) {
      const text: string = `${error.name}: ${error.message} (exit ${error.exitCode})`;
      void text;
    }
  }

  const stream: EventStream = client.events('echo');
  const confirmed: boolean = await stream.ready;
  for await (const event of stream) {
    const e: QueueEvent = event;
    const fields: [string, string, string] = [e.function, e.event, e.id];
    const extra: [number | undefined, number | undefined, string | number | undefined, JobState | undefined] = [
      e.attempt,
      e.seq,
      e.done,
      e.state,
    ];
    // A finish of a job a client waits on carries its record, and its output when small text.
    const carried: [JobRecord | undefined, string | undefined, boolean | undefined] = [e.record, e.output, e.output_omitted];
    // A checkpoint tells the size of the checkpoint the running job saved.
    const size: number | undefined = e.event === 'checkpoint' ? e.bytes : undefined;
    void [fields, extra, e.total, e.message, e.at_ms, carried, size];
    if (e.event === 'finish') break;
  }
  const everything = client.events();
  everything.close();

  const cancelled: CancelOutcome = await client.cancel(one.id);
  console.log(describe(cancelled));
  const retried: boolean = await client.retry(one.id);
  const fresh: RetryOptions = { fresh: true };
  const startedOver: boolean = await client.retry(one.id, fresh);
  await client.retry(one.id, { fresh: false });
  // @ts-expect-error fresh is true or false
  await client.retry(one.id, { fresh: 'yes' });
  void startedOver;

  const queues: QueueOverview[] = await client.queues();
  for (const q of queues) {
    const numbers: number[] = [q.queued, q.scheduled, q.running, q.waiting, q.succeeded, q.failed, q.cancelled, q.workers];
    const row: [string, boolean] = [q.function, q.paused];
    void [numbers, row];
  }

  await client.close();
  void [cluster, created, state, final, counts, fraction, message, failure, output, times, retention, ids, uniq];
  void [record, log, waited, all, confirmed, retried];
}

function helpers(): void {
  const limits: number[] = [
    LIMITS.MIN_PRIORITY,
    LIMITS.MAX_PRIORITY,
    LIMITS.MAX_TAGS,
    LIMITS.MAX_DEPENDENCIES,
    LIMITS.MAX_KEY_BYTES,
    LIMITS.MAX_INPUT_BYTES,
    LIMITS.MAX_ATTEMPTS,
    LIMITS.MAX_DURATION_MS,
    LIMITS.DEFAULT_RETENTION_MS,
    LIMITS.DEFAULT_FAILED_RETENTION_MS,
    LIMITS.ENQUEUE_BATCH,
    LIMITS.RESPONSE_TIMEOUT_MS,
    LIMITS.MAX_MIN_REPLICAS,
    LIMITS.MIN_REPLICAS_TIMEOUT_MS,
  ];
  const parsed: { id: string; function: string; number: number } = parseJobId('echo:42');
  const name: string = checkFunction('echo');
  // @ts-expect-error LIMITS is read-only
  LIMITS.MAX_TAGS = 64;
  void [limits, parsed, name];
}

async function flows(client: Client): Promise<void> {
  // README.md's Flows section, as it is written there.
  const { id, jobs } = await client.submitFlow({
    name: 'diamond',
    jobs: {
      a: { function: 'reverse', input: 'abc' },
      b: { function: 'reverse', input: 'xyz', after: ['a'] },
      c: { function: 'reverse', input_json: { n: 2 }, after: ['a'] },
      d: { function: 'join', after: ['c', { job: 'b', on_failure: 'ignore' }] },
    },
  });
  const status = await client.waitFlow(id, { timeoutMs: 60000 });
  console.log(status.counts, (await client.status(jobs.d)).output!.toString());

  const policy: OnFailure = 'continue';
  const entries: FlowAfter[] = ['a', 'echo:7', { job: 'b' }, { job: 'c', on_failure: policy }, { job: 'd', on_failure: null }];
  const job: FlowJobDocument = {
    function: 'echo',
    input: Buffer.from('bytes'),
    priority: 5,
    delay_ms: 1000,
    attempts: 3,
    timeout_ms: 30000,
    retention_ms: 3600000,
    failed_retention_ms: 7200000,
    tags: ['t'],
    after: entries,
  };
  const other: FlowJobDocument = { function: 'echo', input_base64: 'aGk=', at_ms: Date.now() + 60000 };
  const document: FlowDocument = { name: 'all', jobs: { job, other, json: { function: 'echo', input_json: [1, { a: 'b' }] } } };
  // @ts-expect-error a flow's jobs are always new: no uniq key
  const refused: FlowJobDocument = { function: 'echo', uniq: 'k' };
  // @ts-expect-error the document names options as the HTTP API does (delay_ms)
  const camel: FlowJobDocument = { function: 'echo', delayMs: 5 };
  const submitted: SubmittedFlow = await client.submitFlow(document);
  const again: SubmittedFlow = await client.submitFlow(JSON.stringify(document));
  const flowId: number = submitted.id;
  const jobIds: string[] = Object.values(again.jobs);

  const read: FlowStatus = await client.flow(flowId);
  const byText: FlowStatus = await client.flow(String(flowId));
  const fields: [number, string, Date, boolean, string[]] = [read.id, read.name, read.createdAt, read.ended, read.sinks];
  const succeeded: number | undefined = read.counts.succeeded;
  const missing: number | undefined = read.counts.missing;
  for (const j of read.jobs) {
    const row: [string, string, number, string | null] = [j.name, j.id, j.outputBytes, j.error];
    const edges: FlowEdge[] = j.after;
    const policies: OnFailure[] = edges.map((edge) => edge.onFailure);
    const waitedOn: string[] = edges.map((edge) => edge.job);
    void [row, policies, waitedOn];
  }
  const cancelled: number = await client.cancelFlow(flowId);
  const retried: string[] = await client.retryFlow(flowId);
  const waitOptions: WaitFlowOptions = { timeoutMs: 1000 };
  try {
    await client.waitFlow(flowId, waitOptions);
  } catch (error) {
    if (error instanceof WaitTimeoutError) {
      const flow: number | undefined = error.flow;
      void flow;
    } else if (error instanceof NotFoundError) {
      const flow: number | undefined = error.flow;
      void flow;
    }
  }
  const edgeOptions: EnqueueOptions = { after: ['fetch:7', 'parse:3'], onFailure: { 'fetch:7': 'ignore', 'parse:3': policy } };
  // @ts-expect-error a policy is cancel, ignore or continue
  await client.enqueue('echo', 'x', { after: ['fetch:7'], onFailure: { 'fetch:7': 'skip' } });
  await client.enqueue('join', '', edgeOptions);
  const limits: number[] = [LIMITS.MAX_FLOW_JOBS, LIMITS.MAX_FLOW_NAME_BYTES];
  void [refused, camel, jobIds, byText, fields, succeeded, missing, cancelled, retried, limits];
}

async function batches(client: Client): Promise<void> {
  // README.md's Batches section, as it is written there.
  const { id, jobs } = await client.batch(
    [
      { function: 'resize', input: 'a.png' },
      { function: 'resize', input: 'b.png', options: { attempts: 3 } },
      { function: 'index', input: 'catalog', options: { priority: 'high' } },
    ],
    { name: 'nightly', onSuccess: { function: 'publish', data: { to: 'ops' } }, onComplete: { function: 'cleanup' } },
  );
  const status = await client.batchStatus(id);
  console.log(status.pending, status.failedIds);

  const callback: BatchCallback = { function: 'on_done', data: [1, 'two'] };
  const options: BatchOptions = { name: 'filled', onComplete: callback, onSuccess: null };
  const open: string = await client.openBatch(options);
  await client.openBatch();
  const job: BatchJob = { function: 'echo', input: Buffer.from('x'), options: { delayMs: 1000, after: ['fetch:7'] } };
  // @ts-expect-error a batch's jobs are always new: no uniq key
  const refused: BatchJob = { function: 'echo', options: { uniq: 'k' } };
  // @ts-expect-error nor the options on a uniq key
  const windowed: BatchJob = { function: 'echo', options: { uniqForMs: 1000 } };
  // @ts-expect-error options go in `options`
  const flat: BatchJob = { function: 'echo', priority: 3 };
  const added: string[] = await client.addToBatch(open, [job, { function: 'fail' }]);
  const closed: void = await client.closeBatch(open);
  const submitted: SubmittedBatch = await client.batch([job]);
  const read: BatchStatus = await client.batchStatus(submitted.id);
  const counts: number[] = [read.total, read.pending, read.succeeded, read.failed, read.cancelled];
  const fields: [string, string, boolean, string[], string[], Date, Date | null] = [
    read.id, read.name, read.open, read.failedIds, read.cancelledIds, read.createdAt, read.endedAt,
  ];
  const callbacks: Array<string | null> = [read.onSuccess, read.onComplete];
  if (read.onComplete !== null && read.onComplete !== 'due') {
    const input: BatchCallbackInput = JSON.parse((await client.wait(read.onComplete)).output!.toString());
    const kind: 'success' | 'complete' = input.callback;
    const numbers: number[] = [input.total, input.succeeded, input.failed, input.cancelled];
    const ids: string[] = [...input.failed_ids, ...input.cancelled_ids, input.batch, input.name];
    void [kind, numbers, ids, input.data];
  }
  try {
    await client.addToBatch(open, [job]);
  } catch (error) {
    if (error instanceof NotFoundError) {
      const batch: string | undefined = error.batch;
      void batch;
    } else if (error instanceof ConflictError) {
      void error.message;
    }
  }
  const most: number = LIMITS.MAX_BATCH_JOBS;
  void [jobs, refused, windowed, flat, added, closed, counts, fields, callbacks, most];
}

async function groups(client: Client): Promise<void> {
  // README.md's Groups section, as it is written there.
  await client.configure('render', { groupConcurrency: 2 });         // each tenant: 2 jobs at once
  await client.configureGroup('render', 'acme', { concurrency: 1 });  // acme's jobs one at a time
  await client.enqueue('render', 'page 1', { group: 'acme' });
  await client.configureGroup('render', 'spammer', { paused: true }); // the others go on
  console.log(await client.groups('render', { limit: 5 }));           // {groups: 2, ...}

  const rate: RateLimit = { limit: 10, intervalMs: 60000 };
  const settings: FunctionSettings = {
    paused: false,
    concurrency: 4,
    rateLimit: rate,
    keepFinished: null,
    groupConcurrency: 1,
    groupRateLimit: null,
  };
  const config: FunctionConfig = await client.configure('render', settings);
  await client.configure('render');
  const read: FunctionConfig = await client.config('render');
  const numbers: Array<number | null> = [config.concurrency, config.keepFinished, read.groupConcurrency];
  const rates: Array<RateLimit | null> = [config.rateLimit, read.groupRateLimit];
  const paused: boolean = read.paused;
  // @ts-expect-error a rate limit is {limit, intervalMs}
  await client.configure('render', { rateLimit: 10 });
  // @ts-expect-error settings are camelCase
  await client.configure('render', { group_concurrency: 1 });

  const own: GroupSettings = { concurrency: null, rateLimit: { limit: 1, intervalMs: 1000 }, paused: true };
  const group: GroupConfig = await client.configureGroup('render', 'acme', own);
  const fields: [number | null, RateLimit | null, boolean] = [group.concurrency, group.rateLimit, group.paused];
  const options: GroupsOptions = { limit: 1000, group: 'acme' };
  const overview: GroupsOverview = await client.groups('render', options);
  await client.groups('render');
  const counts: [number, boolean, number] = [overview.groups, overview.truncated, overview.ungroupedReady];
  for (const info of overview.listed) {
    const g: GroupInfo = info;
    const row: [string, number, number, GroupConfig, Date | null] = [g.group, g.ready, g.running, g.config, g.rateLimitedUntil];
    void row;
  }
  const job: FlowJobDocument = { function: 'render', group: 'acme' };
  const batchJob: BatchJob = { function: 'render', options: { group: 'acme' } };
  const item: BatchItem = { input: 'x', group: 'acme' };
  void [numbers, rates, paused, fields, counts, job, batchJob, item];
}

async function replicated(): Promise<void> {
  // README.md's High availability section, as it is written there.
  const client = await Client.connect('redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/jobs', {
    minReplicas: 1,
    minReplicasTimeoutMs: 500,
  });
  try {
    await client.enqueue('echo', 'kept if the primary fails');
  } catch (error) {
    if (error instanceof NotReplicatedError) console.log(error.wanted, error.confirmed); // written; sent again is safe
    else throw error;
  }
  await client.configure('echo', { minReplicas: 2 }); // every client's enqueues of echo
  const options: ConnectOptions = { minReplicas: 0, tls: {} };
  await Client.connect('rediss+sentinel://app:secret@[::1]:5000/jobs?db=1&sentinel_password=watch', options);
  // @ts-expect-error minReplicas is a number
  await Client.connect('redis://127.0.0.1:6379', { minReplicas: '1' });
  const read: FunctionConfig = await client.config('echo');
  const count: number | null = read.minReplicas;
  const cleared: FunctionSettings = { minReplicas: null };
  await client.configure('echo', cleared);
  await client.close();
  void count;
}

async function encrypted(): Promise<void> {
  // README.md's Encrypted job data section, as it is written there.
  const client = await Client.connect('redis://127.0.0.1:6379', { encryptionKeyFile: 'keys' });
  await client.configure('invoice', { encrypt: true });
  const { id } = await client.enqueue('invoice', '{"card": "4111 1111 1111 1111"}');
  const done = await client.wait(id, { timeoutMs: 30000 });
  console.log(done.output!.toString(), (await client.input(id))!.toString());
  const on: boolean = (await client.config('invoice')).encrypt;
  const options: ConnectOptions = { encryptionKeyFile: null, encryptAll: false };
  // @ts-expect-error encryptAll is true or false
  await Client.connect('redis://127.0.0.1:6379', { encryptionKeyFile: 'keys', encryptAll: 1 });
  await client.close();
  void [on, options];
}

async function tracing(client: Client): Promise<void> {
  // README.md's Tracing section, as it is written there.
  await trace.getTracer('shop').startActiveSpan('checkout', async (span) => {
    await client.enqueue('render', 'order 7');        // carries its send span, a child of checkout
    span.end();
  });
  await client.enqueue('render', 'order 8', {        // or a context of your own
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    tracestate: 'vendor=value',
  });

  const parent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const options: EnqueueOptions = { traceparent: parent, tracestate: 'vendor=value' };
  // @ts-expect-error a traceparent is its header's text
  await client.enqueue('render', 'x', { traceparent: { traceId: 'a', spanId: 'b' } });
  const job: Job = await client.status('render:1');
  const record: JobRecord = job.record;
  const carried: [string | undefined, string | undefined] = [record.trace, record.tracestate];
  const other: unknown = record.state;
  const flowJob: FlowJobDocument = { function: 'render', traceparent: parent, tracestate: 'vendor=value' };
  const batchJob: BatchJob = { function: 'render', options: { traceparent: parent } };
  const item: BatchItem = { input: 'x', traceparent: parent, tracestate: 'vendor=value' };
  const most: number = LIMITS.MAX_TRACESTATE_BYTES;
  void [options, carried, other, flowJob, batchJob, item, most];
}

void [quickStart, everyCall, helpers, flows, batches, groups, replicated, encrypted, tracing];
