// Enqueues through the Node client, for scripts/bench: ARGV url, single, bulk.
//
// Prints JSON: enqueues per second one at a time (`enqueue`) and in bulk (`enqueueMany`,
// which sends 1000 jobs per call), each job's input 'x' as in the other rows of the benchmark.
const path = require('path');
const { Client } = require(path.join(__dirname, '..', '..', 'clients', 'node'));

async function main() {
  const [url, single, bulk] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
  const client = await Client.connect(url);
  let started = process.hrtime.bigint();
  for (let i = 0; i < single; i++) await client.enqueue('bench-node-single', 'x');
  const seconds = () => Number(process.hrtime.bigint() - started) / 1e9;
  const singlePerS = single / seconds();
  started = process.hrtime.bigint();
  await client.enqueueMany('bench-node-bulk', new Array(bulk).fill('x'));
  const bulkPerS = bulk / seconds();
  await client.close();
  console.log(JSON.stringify({ single_per_s: singlePerS, bulk_per_s: bulkPerS }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
