"""Drives qless-py (0.11.4, from PyPI; its qless-core script patched for Redis 7 by
install.sh) for wasmgear's tests. Each command prints JSON.

    python qless_py.py.py URL put QUEUE KLASS DATA [priority=P] [tags=a,b] [retries=R]
                                             [depends=JID,JID] [delay=S]   # the new jid
    python qless_py.py.py URL job JID            # the job as qless-py sees it, or null
    python qless_py.py.py URL config KEY VALUE   # sets a qless setting
    python qless_py.py.py URL pop QUEUE WORKER   # pops as qless-py worker WORKER: the job or null
    python qless_py.py.py URL complete JID WORKER
    python qless_py.py.py URL cancel JID
    python qless_py.py.py URL workers            # every worker and its job counts
    python qless_py.py.py URL worker NAME        # one worker's jobs
    python qless_py.py.py URL counts QUEUE       # the queue's counts
"""

import json
import sys

import qless


def describe(job):
    if job is None:
        return None
    return {
        "jid": job.jid,
        "klass": job.klass_name,
        "queue": job.queue_name,
        "state": job.state,
        "worker": job.worker_name,
        "data": job.data,
        "priority": job.priority,
        "tags": job.tags,
        "retries": job.original_retries,
        "remaining": job.retries_left,
        "failure": job.failure,
        "history": job.history,
        "dependents": job.dependents,
        "dependencies": job.dependencies,
        "output": job.client.redis.hget("ql:j:" + job.jid, "output"),
    }


def main():
    url, command, *args = sys.argv[1:]
    client = qless.Client(url, hostname="qless-py-tests")
    if command == "put":
        queue, klass, data, *options = args
        named = dict(option.split("=", 1) for option in options)
        listed = lambda key: [x for x in named.get(key, "").split(",") if x]
        result = client.queues[queue].put(
            klass,
            json.loads(data),
            priority=int(named.get("priority", 0)),
            tags=listed("tags"),
            retries=int(named.get("retries", 5)),
            depends=listed("depends"),
            delay=float(named.get("delay", 0)),
        )
    elif command == "job":
        result = describe(client.jobs[args[0]])
    elif command == "config":
        client.config[args[0]] = args[1]
        result = None
    elif command == "pop":
        queue, worker = args
        popper = qless.Client(url, hostname=worker)
        result = describe(popper.queues[queue].pop())
    elif command == "complete":
        jid, worker = args
        job = qless.Client(url, hostname=worker).jobs[jid]
        result = job.complete()
    elif command == "cancel":
        result = client.jobs[args[0]].cancel()
    elif command == "workers":
        result = client.workers.counts
    elif command == "worker":
        result = client.workers[args[0]]
    elif command == "counts":
        result = client.queues[args[0]].counts
    elif command == "recur":
        queue, klass, data, interval = args
        result = client.queues[queue].recur(klass, json.loads(data), int(interval))
    elif command == "stats":
        result = client.queues[args[0]].stats()
    else:
        sys.exit(f"unknown command {command!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
