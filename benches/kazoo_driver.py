#!/usr/bin/env python3
"""Python Kazoo's side of `cargo bench --bench lock`.

Drives Kazoo's `Lock` the way the bench drives zkfence, so that both are measured in the
same run, on the same ensemble, in interleaved rounds. The bench starts it as

    kazoo_driver.py HOSTS CONTENDERS SESSION_TIMEOUT_S

It connects one client for uncontended cycles and CONTENDERS clients for the handoff, all
before the first command, so that the bench can count their requests at the server (`cons`)
before and after each command. It prints one JSON line with the session ids, then answers
each JSON command line read from stdin with one JSON line:

    {"cmd": "touch"}                                -> {}
    {"cmd": "uncontended", "path": P, "cycles": N}  -> {"latencies_s": [...], "elapsed_s": T, "ops": N}
    {"cmd": "contended", "path": P, "handoffs": H}  -> {"latencies_s": [...], "elapsed_s": T, "ops": G}
    {"cmd": "quit"}                                 -> exits

Latencies are per acquire+release cycle (uncontended) or from a holder calling `release()`
until the next holder's `acquire()` returns (contended), on one clock.
"""

import json
import logging
import sys
import threading
import time

import kazoo
from kazoo.client import KazooClient


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def connect(hosts, session_timeout):
    client = KazooClient(hosts=hosts, timeout=session_timeout)
    client.start(timeout=30)
    return client


def session_id(client):
    return client.client_id[0]


class Driver:
    def __init__(self, hosts, contenders, session_timeout):
        self.single = connect(hosts, session_timeout)
        self.group = [connect(hosts, session_timeout) for _ in range(contenders)]
        # One Lock object per (client, path), reused across cycles as an application would.
        self.locks = {}

    def lock(self, client_index, client, path):
        key = (client_index, path)
        if key not in self.locks:
            self.locks[key] = client.Lock(path)
        return self.locks[key]

    def touch(self):
        # One read per client right before the bench's first `cons` snapshot, so no idle
        # heartbeat falls inside a measured window.
        for client in [self.single] + self.group:
            client.exists("/")
        return {}

    def uncontended(self, path, cycles):
        lock = self.lock(-1, self.single, path)
        latencies = []
        start = time.perf_counter()
        for _ in range(cycles):
            t = time.perf_counter()
            lock.acquire()
            lock.release()
            latencies.append(time.perf_counter() - t)
        return {"latencies_s": latencies, "elapsed_s": time.perf_counter() - start, "ops": cycles}

    def contended(self, path, handoffs):
        mutex = threading.Lock()
        state = {"grants": 0, "released_at": None}
        latencies = []
        errors = []

        def worker(index, client):
            lock = self.lock(index, client, path)
            try:
                while True:
                    with mutex:
                        if state["grants"] >= handoffs:
                            return
                    lock.acquire()
                    now = time.perf_counter()
                    with mutex:
                        if state["released_at"] is not None:
                            latencies.append(now - state["released_at"])
                        state["grants"] += 1
                        state["released_at"] = time.perf_counter()
                    lock.release()
            except Exception as err:  # reported to the bench, which fails the run
                errors.append(repr(err))

        threads = [
            threading.Thread(target=worker, args=(i, c), daemon=True) for i, c in enumerate(self.group)
        ]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        if errors:
            return {"error": "; ".join(errors)}
        return {"latencies_s": latencies, "elapsed_s": elapsed, "ops": state["grants"]}

    def close(self):
        for client in [self.single] + self.group:
            client.stop()
            client.close()


def main():
    logging.basicConfig(level=logging.ERROR)
    hosts, contenders, session_timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    driver = Driver(hosts, contenders, session_timeout)
    reply(
        {
            "kazoo": getattr(kazoo, "__version__", "unknown"),
            "python": sys.version.split()[0],
            "single": session_id(driver.single),
            "contended": [session_id(c) for c in driver.group],
        }
    )
    for line in sys.stdin:
        cmd = json.loads(line)
        name = cmd["cmd"]
        if name == "quit":
            break
        try:
            if name == "touch":
                reply(driver.touch())
            elif name == "uncontended":
                reply(driver.uncontended(cmd["path"], cmd["cycles"]))
            elif name == "contended":
                reply(driver.contended(cmd["path"], cmd["handoffs"]))
            else:
                reply({"error": "unknown command " + name})
        except Exception as err:
            reply({"error": repr(err)})
    driver.close()


if __name__ == "__main__":
    main()
