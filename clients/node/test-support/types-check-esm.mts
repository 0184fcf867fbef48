// Compiled, never run (run-tests: `tsc --noEmit -p test-support`): the package imported as an
// ES module by its name resolves, through the "exports" map's `import` condition, to
// index.d.mts, which gives the same declarations as the CommonJS entry, and a default export.

import wasmgear, { Client, LIMITS, BadInputError, parseJobId } from 'wasmgear';
import type { Job, EnqueueOptions } from 'wasmgear';

async function esm(): Promise<void> {
  const client: Client = await Client.connect('redis://127.0.0.1:6379');
  const options: EnqueueOptions = {
    priority: 'high',
    tags: ['esm'],
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    tracestate: 'vendor=value',
  };
  const { id } = await client.enqueue('echo', 'hi', options);
  const job: Job = await client.wait(id);
  const carried: string | undefined = job.record.trace;
  const same: typeof Client = wasmgear.Client;
  const bad: boolean = new BadInputError('x') instanceof wasmgear.WasmgearError;
  const most: number = LIMITS.MAX_TAGS;
  void [job, carried, same, bad, most, parseJobId(id).number];
  await client.close();
}

void esm;
