"""Instruction heads kept in the state folder: a new process restores a head's KV state from
disk instead of evaluating it, and nothing it returns changes; damaged or foreign files are
never used."""

from __future__ import annotations

import os

import pytest

from appliance import contracts
from appliance.llm import CallRecord
from appliance.llm.prefixes import PrefixStore

SYSTEM = ("You check whether the evidence states a claim. Write a reason first, then a "
          "verdict: supported, refuted or insufficient. " * 3)
EVIDENCE = ("The Velka ferry leaves Port Ardmore at six every morning and reaches the island two "
            "hours later. In winter it sails only on weekdays.")
FIRST = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Evidence: {EVIDENCE}\nClaim: The ferry leaves at six."}]
AGAIN = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Evidence: {EVIDENCE}\nClaim: The ferry sails on Sundays in winter."}]


# ---------------------------------------------------------------- the files


def test_a_kept_state_reads_back_only_for_its_own_tokens_and_identity(tmp_path):
    store = PrefixStore(tmp_path, "model-a|ctx 2048")
    store.save((1, 2, 3), b"state of 1 2 3")
    assert store.load((1, 2, 3)) == b"state of 1 2 3" and store.loaded == 1
    assert store.load((1, 2)) is None and store.load((1, 2, 3, 4)) is None
    assert PrefixStore(tmp_path, "model-b|ctx 2048").load((1, 2, 3)) is None   # other weights or build
    assert store.damaged == 0


@pytest.mark.parametrize("damage", ["flip", "cut", "magic", "header"])
def test_a_damaged_file_is_removed_and_counted_never_used(tmp_path, damage):
    store = PrefixStore(tmp_path, "model-a")
    store.save((5, 6, 7), b"x" * 64)
    path = store.path_for((5, 6, 7))
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-1] ^= 0xFF
    elif damage == "cut":
        data = data[:-10]
    elif damage == "magic":
        data[:4] = b"junk"
    else:
        data = data.replace(b'"size"', b'"sizz"')
    path.write_bytes(bytes(data))
    assert store.load((5, 6, 7)) is None
    assert store.damaged == 1 and not path.exists()


def test_the_least_recently_used_go_past_the_capacity(tmp_path):
    store = PrefixStore(tmp_path, "model-a")
    store.save((1,), b"one")
    store.capacity = 2 * store.path_for((1,)).stat().st_size + 2   # room for two such files
    store.save((2,), b"two")
    os.utime(store.path_for((1,)), (1, 1))
    os.utime(store.path_for((2,)), (2, 2))
    store.load((1,))                      # used: now the most recent
    store.save((3,), b"three")
    assert store.load((1,)) == b"one" and store.load((3,)) == b"three"
    assert not store.path_for((2,)).exists()


def test_an_unwritable_folder_costs_a_warning_not_the_run(tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    store = PrefixStore(blocked, "model-a")
    store.save((1, 2), b"state")
    store.save((3, 4), b"state")
    assert store.failed_writes == 2 and store.saved == 0
    assert sum("cannot write" in r.getMessage() for r in caplog.records) == 1
    assert store.load((1, 2)) is None


# ---------------------------------------------------------------- with the real model


def _call(home, messages, **overrides):
    from appliance.llm import ModelPool
    from conftest import llm_settings

    records: list[CallRecord] = []
    with ModelPool(llm_settings(home, **overrides), cache=False) as pool:
        engine = pool.for_role("verifier")
        engine.add_listener(records.append)
        out = engine.structured(messages, contracts.Vote, seed=3, max_tokens=80)
        store = engine.backend.store
    return out, records[0], store


def _first_try(record: CallRecord) -> tuple[int, int]:
    """Prompt tokens and evaluated prompt tokens of a call's first attempt (a retry submits
    the prompt again and evaluates only its two-token tail)."""
    return record.prompt_tokens // record.attempts, record.prompt_evaluated - 2 * (record.attempts - 1)


def test_a_new_process_restores_the_kept_head_and_returns_the_same(tmp_path):
    """One pool stands for one process: the second finds the head the first evaluated in the
    state folder, evaluates only the rest of its prompt, and returns what a model that kept
    nothing returns; a damaged file is evaluated again and rewritten."""
    home = tmp_path / "home"
    _, first, store = _call(home, FIRST)
    prompt, evaluated = _first_try(first)
    assert store is not None and store.saved == 1 and evaluated == prompt
    files = list((home / "cache" / "prefixes").glob("*.kv"))
    assert len(files) == 1

    restored, again, store = _call(home, AGAIN)
    assert store.loaded == 1 and store.saved == 0
    cold, cold_record, none = _call(tmp_path / "cold", AGAIN, **{"llm.keep_prefixes": False})
    assert none is None and not (tmp_path / "cold" / "cache" / "prefixes").exists()
    assert restored == cold
    prompt, evaluated = _first_try(again)
    assert prompt == _first_try(cold_record)[0] and prompt - evaluated > 40   # the system message was not evaluated

    data = bytearray(files[0].read_bytes())
    data[-100] ^= 0xFF
    files[0].write_bytes(bytes(data))
    damaged, record, store = _call(home, AGAIN)
    assert damaged == cold and store.damaged == 1 and store.saved == 1
    prompt, evaluated = _first_try(record)
    assert evaluated == prompt                                   # evaluated again, in full
    assert _call(home, AGAIN)[2].loaded == 1                     # and kept whole again
