"""A writer process for crash tests: appends until killed, printing each proof after its ack.

Usage: python writer.py STORE_DIR PREFIX [COUNT] [THREADS]
Each acknowledged proof is printed as one JSON line (flushed) only after
``Store.write`` returned, so whatever the parent reads was acknowledged.
"""

from __future__ import annotations

import json
import sys
import threading

from retained import Store


def main() -> None:
    directory, prefix = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    store = Store(directory, lock_wait_s=60)
    out_lock = threading.Lock()

    def work(t: int) -> None:
        for i in range(count):
            proof = store.write(f"{prefix} thread {t} record {i} " + "x" * (i % 97), client_op_id=f"{prefix}-{t}-{i}")
            with out_lock:
                sys.stdout.write(json.dumps(proof) + "\n")
                sys.stdout.flush()

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
