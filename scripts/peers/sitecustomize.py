"""Loaded by every Python process of `make bench-peers` (the script puts this folder and
tests/netguard on PYTHONPATH): loopback only, and each refused attempt is appended to the
file named by $PEERS_BLOCKED_LOG so the benchmark can report what tried to leave."""

import os
import time

import loopback_guard


def _record(message: str) -> None:
    path = os.environ.get("PEERS_BLOCKED_LOG")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{time.time():.3f}\t{os.getpid()}\t{message}\n")
    except OSError:
        pass


loopback_guard.install(on_block=_record)
