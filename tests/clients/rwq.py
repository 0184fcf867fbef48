"""Drives MeVitae's redis-work-queue for Python (0.1.5, from PyPI) for wasmgear's tests.

    python rwq.py URL PREFIX add ID DATA   # WorkQueue.add_item
    python rwq.py URL PREFIX clean         # WorkQueue.light_clean
    python rwq.py URL PREFIX lengths       # queue_len and processing, on one line
"""

import sys

from redis import Redis
from redis_work_queue import Item, KeyPrefix, WorkQueue


def main() -> None:
    url, prefix, command, *args = sys.argv[1:]
    db = Redis.from_url(url)
    queue = WorkQueue(KeyPrefix(prefix))
    if command == "add":
        item_id, data = args
        queue.add_item(db, Item(data.encode(), id=item_id))
    elif command == "clean":
        queue.light_clean(db)
    elif command == "lengths":
        print(queue.queue_len(db), queue.processing(db))
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
