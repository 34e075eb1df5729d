"""Sharing one model: the run queue, bounded caches and deployment settings."""

from __future__ import annotations

import threading
import time

import pytest
from sinkscope.runs import BoundedCache, RunQueue
from sinkscope.settings import Settings


def test_the_queue_runs_one_at_a_time_and_tells_waiters_their_place() -> None:
    queue, active, peak, places = RunQueue(), [0], [0], []
    lock = threading.Lock()

    def work() -> None:
        with queue.turn(on_wait=places.append):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.05)
            with lock:
                active[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 1
    assert len(places) == 4 and max(places) >= 2
    assert queue.waiting == 0


def test_the_cache_bounds_entries_per_owner_and_in_total() -> None:
    cache = BoundedCache(total=3, per_owner=2)
    for i in range(3):
        cache.put(("a", i), i, owner="alice")
    assert cache.get(("a", 0)) is None and cache.get(("a", 2)) == 2
    cache.put("b1", 1, owner="bob")
    cache.put("c1", 1, owner="carol")
    assert len(cache) == 3
    assert cache.get(("a", 1)) is None  # the least recently used entry went first


def test_get_or_run_computes_once_for_concurrent_callers() -> None:
    cache, queue, calls = BoundedCache(total=4, per_owner=4), RunQueue(), []

    def run() -> str:
        calls.append(1)
        time.sleep(0.05)
        return "result"

    threads = [threading.Thread(target=cache.get_or_run, args=("k", "o", run, queue)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and cache.get("k") == "result"


def test_settings_default_to_local_mode() -> None:
    local = Settings.from_env({})
    assert not local.hosted and local.allows("/any/dir") and local.max_tokens == 2048


@pytest.mark.parametrize("flag", ["1", "true", "yes"])
def test_hosted_settings_allow_only_bundled_models(flag: str) -> None:
    hosted = Settings.from_env({"SINKSCOPE_HOSTED": flag})
    assert hosted.hosted and hosted.max_tokens == 512 and hosted.max_upload_bytes == 200 * 1024
    assert hosted.allows("smollm2-135m") and not hosted.allows("/etc") and not hosted.allows("gpt2")
    narrowed = Settings.from_env({"SINKSCOPE_HOSTED": flag, "SINKSCOPE_MODELS": "smollm2-135m"})
    assert not narrowed.allows("gemma3-270m")
