"""The cache of verified model hashes, shared by every process on one state folder (two
`batch --jobs` workers, two shells): no process loses another's entries."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from appliance.llm.manifest import HashCache

FILES_PER_PROCESS = 40

WRITER = """
import sys, time
from pathlib import Path
from appliance.llm.manifest import HashCache

cache_path, folder, tag, go = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
while not go.exists():  # both processes start writing at the same moment
    time.sleep(0.005)
cache = HashCache(cache_path)
for path in sorted(folder.glob(f"{tag}-*.bin")):
    cache.put(path, (tag * 64)[:64])
"""


def test_two_processes_keep_each_others_hashes(tmp_path):
    """Each of two processes records 40 hashes in one cache file at the same time; all 80 are
    there at the end (with a read-modify-write under a thread lock only, most were lost)."""
    folder = tmp_path / "files"
    folder.mkdir()
    for tag in ("a", "b"):
        for i in range(FILES_PER_PROCESS):
            (folder / f"{tag}-{i:02d}.bin").write_bytes(f"{tag}{i}".encode())
    cache_path = tmp_path / "cache" / "model_hashes.json"
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(cache_path), str(folder), tag, str(go)])
             for tag in ("a", "b")]
    time.sleep(1.0)  # let both interpreters start and wait
    go.touch()
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    data = json.loads(cache_path.read_text(encoding="utf-8"))
    assert len(data) == 2 * FILES_PER_PROCESS, f"{2 * FILES_PER_PROCESS - len(data)} entries lost"
    cache = HashCache(cache_path)
    for path in folder.glob("*.bin"):
        tag = path.name[0]
        assert cache.get(path) == (tag * 64)[:64]
    assert not list(cache_path.parent.glob(".*.tmp")), "no temporary file is left"


def test_a_changed_file_is_hashed_again(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"first")
    cache = HashCache(tmp_path / "hashes.json")
    first = cache.sha256(model)
    model.write_bytes(b"second, longer")
    assert cache.sha256(model) != first
    assert HashCache(None).sha256(model) == cache.sha256(model)  # no cache file: still a hash


def test_an_unwritable_cache_only_costs_time(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    cache = HashCache(blocker / "hashes.json")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    assert len(cache.sha256(model)) == 64 and cache.get(Path(model)) is None
