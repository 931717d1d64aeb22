#!/usr/bin/env python3
"""Python Kazoo's `SetPartitioner`, the peer of zkfence's partitions in `cargo bench --bench lock`.

The bench starts it as

    kazoo_partitioner.py HOSTS SESSION_TIMEOUT_S

and drives members of one partition set, each a `SetPartitioner` on a `KazooClient` (its own
ZooKeeper session) of its own, run by a thread as Kazoo's documentation shows: release the
set when asked (`release_set`), wait while allocating. Each JSON command line read from
stdin is answered with one JSON line:

    {"cmd": "join", "path": P, "items": N, "id": I, "settle_s": S} -> {"session": id}
    {"cmd": "leave", "id": I}                                      -> {}   (finish(): releases, leaves)
    {"cmd": "touch"}                                               -> {}   (one read per session)
    {"cmd": "stop"}                                                -> {}   (every member leaves, sessions closed)
    {"cmd": "quit"}                                                -> exits

`settle_s` is `SetPartitioner`'s `time_boundary`: how long the party must be still before
the members allocate.
"""

import json
import logging
import sys
import threading

from kazoo.client import KazooClient


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Member:
    def __init__(self, hosts, session_timeout, path, items, ident, settle):
        self.client = KazooClient(hosts=hosts, timeout=session_timeout)
        self.client.start(timeout=30)
        self.stop = threading.Event()
        self.partitioner = self.client.SetPartitioner(
            path, set=range(items), identifier=ident, time_boundary=settle
        )
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def session(self):
        return self.client.client_id[0]

    def run(self):
        p = self.partitioner
        while not self.stop.is_set():
            if p.failed:
                return
            elif p.release:
                p.release_set()
            elif p.acquired:
                p.state_change_event.wait(0.1)
                p.state_change_event.clear()
            elif p.allocating:
                p.wait_for_acquire(0.1)

    def leave(self):
        self.stop.set()
        self.thread.join()
        self.partitioner.finish()

    def close(self):
        self.client.stop()
        self.client.close()


def main():
    logging.basicConfig(level=logging.ERROR)
    hosts, session_timeout = sys.argv[1], float(sys.argv[2])
    members = {}
    for line in sys.stdin:
        command = json.loads(line)
        cmd = command["cmd"]
        try:
            if cmd == "join":
                member = Member(
                    hosts,
                    session_timeout,
                    command["path"],
                    command["items"],
                    command["id"],
                    command["settle_s"],
                )
                members[command["id"]] = member
                reply({"session": member.session()})
            elif cmd == "leave":
                member = members.pop(command["id"])
                member.leave()
                member.close()
                reply({})
            elif cmd == "touch":
                for member in members.values():
                    member.client.exists("/")
                reply({})
            elif cmd == "stop":
                for member in members.values():
                    member.leave()
                for member in members.values():
                    member.close()
                members.clear()
                reply({})
            elif cmd == "quit":
                return
            else:
                reply({"error": "unknown command " + cmd})
        except Exception as e:  # the bench reports it and stops
            reply({"error": repr(e)})


if __name__ == "__main__":
    main()
