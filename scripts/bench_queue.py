"""What readers of the job queue cost the run that writes to it (not in `make test`).

A run's worker process asks the queue at every model call whether it was cancelled and writes
each node's progress; the server's request handlers read the same SQLite file for status and
history. This script times the worker's side (``cancel_requested`` and ``set_node``, from a
process of its own, as a worker does) alone, then while ``--readers`` threads of this process
read a job and the history as fast as they are answered, and prints the medians and p95 of
both sides and how many reads were served.

    python scripts/bench_queue.py [--readers 8] [--seconds 5] [--jobs 60]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.jobs import JobQueue, JobRequest  # noqa: E402
from bench_serve import percentile  # noqa: E402 - this script's folder is on the path


def worker_side(path: str, job_id: str, seconds: float, out) -> None:
    """As a run's worker does: a cancel check per model call, a node's progress now and then."""
    queue = JobQueue(Path(path))
    latencies: list[float] = []
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        start = time.perf_counter()
        queue.cancel_requested(job_id)
        if step % 4 == 0:
            queue.set_node(job_id, f"q{step % 12}", "Who named the lake?", "running")
        latencies.append(time.perf_counter() - start)
        step += 1
        time.sleep(0.002)
    out.send(latencies)


def measure(path: Path, job_id: str, readers: int, seconds: float) -> tuple[list[float], list[float]]:
    queue = JobQueue(path)
    stop = threading.Event()
    reads: list[float] = []
    lock = threading.Lock()

    def read_loop(number: int) -> None:
        turn = number
        while not stop.is_set():
            start = time.perf_counter()
            if turn % 2:
                queue.get(job_id)
            else:
                queue.list_jobs(limit=50)
                queue.counts()
            with lock:
                reads.append(time.perf_counter() - start)
            turn += 1

    threads = [threading.Thread(target=read_loop, args=(n,), daemon=True) for n in range(readers)]
    for thread in threads:
        thread.start()
    receive, send = multiprocessing.get_context("spawn").Pipe(duplex=False)
    process = multiprocessing.get_context("spawn").Process(target=worker_side, args=(str(path), job_id, seconds, send))
    process.start()
    writes = receive.recv()
    process.join()
    stop.set()
    for thread in threads:
        thread.join()
    return writes, reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--jobs", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "jobs.sqlite"
        queue = JobQueue(path, max_queued=args.jobs + 1)
        ids = [queue.submit(JobRequest(question=f"Who named lake number {n}?")).id for n in range(args.jobs)]
        job_id = ids[0]
        for n in range(12):
            queue.set_node(job_id, f"q{n}", "Who named the lake?", "done")
        for label, readers in (("no readers", 0), (f"{args.readers} readers", args.readers)):
            writes, reads = measure(path, job_id, readers, args.seconds)
            line = (f"{label:>12}: worker call p50 {1000 * statistics.median(writes):.2f} ms, "
                    f"p95 {1000 * percentile(writes, 0.95):.2f} ms ({len(writes)} calls)")
            if reads:
                line += (f"; reads p50 {1000 * statistics.median(reads):.2f} ms, p95 "
                         f"{1000 * percentile(reads, 0.95):.2f} ms ({len(reads) / args.seconds:.0f} a second)")
            print(line, flush=True)


if __name__ == "__main__":
    main()
