// No-op sandboxed processor used by bench.mjs for the sandbox_process /
// sandbox_threads drain modes. BullMQ loads it in a child process / worker
// thread via dynamic import() and calls the default export per job.
export default async function noop(_job) {}
