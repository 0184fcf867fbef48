// Drives MeVitae's redis-work-queue for Node.js (@mevitae/redis-work-queue 0.1.5, from npm)
// for wasmgear's tests:
//
//   node rwq.cjs URL PREFIX add ID DATA   // WorkQueue.addItem
//   node rwq.cjs URL PREFIX clean         // WorkQueue.lightClean
//
// The package's `main` is its TypeScript source; its compiled `dist/` is loaded instead.
const path = require("path");

const modules = path.join(process.env.RWQ_NODE_MODULES, "node_modules");
const { WorkQueue, KeyPrefix, Item } = require(
  path.join(modules, "@mevitae/redis-work-queue/dist/WorkQueue.js"),
);
const Redis = require(path.join(modules, "ioredis"));

async function main() {
  const [url, prefix, command, ...args] = process.argv.slice(2);
  const db = new Redis(url);
  const queue = new WorkQueue(new KeyPrefix(prefix));
  try {
    if (command === "add") {
      const [id, data] = args;
      await queue.addItem(db, new Item(data, id));
    } else if (command === "clean") {
      await queue.lightClean(db);
    } else {
      throw new Error(`unknown command ${command}`);
    }
  } finally {
    db.disconnect();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
