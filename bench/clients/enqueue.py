"""Enqueues through the Python client, for scripts/bench: ARGV url, single, bulk.

Prints JSON: enqueues per second one at a time (`enqueue`) and in bulk (`enqueue_many`, which
sends 1000 jobs per call), each job's input b"x" as in the other rows of the benchmark.
"""
import json
import sys
import time

from wasmgear import Client

url, single, bulk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = Client.from_url(url)
started = time.perf_counter()
for _ in range(single):
    client.enqueue("bench-py-single", b"x")
single_per_s = single / (time.perf_counter() - started)
started = time.perf_counter()
client.enqueue_many("bench-py-bulk", [b"x"] * bulk)
bulk_per_s = bulk / (time.perf_counter() - started)
client.close()
print(json.dumps({"single_per_s": single_per_s, "bulk_per_s": bulk_per_s}))
