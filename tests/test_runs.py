"""Sharing one model: the run queue, bounded caches and deployment settings."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from sinkscope.serving.runs import CHECK_EVERY, BoundedCache, RunQueue, Unwanted, nbytes
from sinkscope.serving.settings import Settings


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
    assert len(places) == 4 and max(wait.visitors for wait in places) >= 2
    assert not any(wait.server for wait in places)
    assert queue.waiting == 0


MIB = 2**20


def together(*work: Callable[[], None]) -> None:
    """Start each function on a thread of its own, and wait for them all."""
    threads = [threading.Thread(target=function) for function in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)


def one_mib() -> np.ndarray:
    return np.zeros(MIB // 8)  # float64


def test_the_cache_bounds_bytes_per_owner_and_in_total() -> None:
    cache = BoundedCache(total=int(3.5 * MIB), per_owner=int(2.5 * MIB))
    for i in range(3):
        cache.put(("a", i), one_mib(), owner="alice")
    assert cache.get(("a", 0)) is None and cache.get(("a", 2)) is not None  # alice may hold 2 of them
    cache.put("b1", one_mib(), owner="bob")
    cache.put("c1", one_mib(), owner="carol")
    assert len(cache) == 3 and cache.size <= 3.5 * MIB
    assert cache.get(("a", 1)) is None  # the least recently used entry went first


def test_a_result_larger_than_the_bound_stays_until_the_next_one() -> None:
    cache = BoundedCache(total=MIB, per_owner=MIB)
    cache.put("big", np.zeros(MIB // 4), owner="alice")  # 2 MiB: the session is about to show it
    assert cache.get("big") is not None
    cache.put("small", np.zeros(8), owner="alice")
    assert cache.get("big") is None and cache.get("small") is not None


@dataclasses.dataclass(frozen=True)
class Result:
    residual: np.ndarray
    heads: dict[str, np.ndarray]
    tokens: tuple[str, ...]


def test_nbytes_counts_arrays_once_and_views_by_their_base() -> None:
    residual = np.zeros((4, 64, 32), dtype=np.float32)
    shared = np.ones((3, 2))
    result = Result(residual, {"sink": shared, "again": shared, "first_layer": residual[0]}, ("a", "b"))
    size = nbytes(result)
    assert residual.nbytes + shared.nbytes <= size < residual.nbytes + shared.nbytes + 2000


def test_get_or_run_computes_once_for_concurrent_callers() -> None:
    cache, queue, calls = BoundedCache(total=MIB, per_owner=MIB), RunQueue(), []

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


def test_a_long_job_lets_a_short_run_in_between_its_steps() -> None:
    """One visitor's long job (many steps) must not hold a second visitor's short run until it ends."""
    queue, order = RunQueue(), []
    started = threading.Event()

    def long_job() -> None:
        with queue.turn():
            for step in range(20):
                started.set()
                time.sleep(0.01)
                order.append(f"long {step}")
                queue.let_others_in()

    def short_run() -> None:
        started.wait()
        with queue.turn():
            order.append("short")

    together(long_job, short_run)
    assert order.index("short") <= 3 and len(order) == 21 and queue.waiting == 0
    with queue.turn():
        queue.let_others_in()  # nobody waits: the holder goes straight on


def test_a_visitor_goes_before_the_servers_background_work_and_is_told_so() -> None:
    """The warm start holds the model: a visitor who asks waits one of its steps, not the rest of the warm-up, and the
    warm start's own next job waits until the visitor is done."""
    queue, order, waits = RunQueue(), [], []
    started, warmed = threading.Event(), threading.Event()

    def warm_start() -> None:
        for job in range(3):
            with queue.turn(background=True):
                for step in range(10):
                    started.set()
                    time.sleep(0.01)
                    order.append(f"warm {job}.{step}")
                    queue.let_others_in()
        warmed.set()

    def visitor() -> None:
        started.wait()
        time.sleep(0.03)  # some warm steps have been timed: the wait has an estimate
        with queue.turn(on_wait=waits.append):
            order.append("visitor")
            assert not warmed.is_set()

    together(warm_start, visitor)
    assert order.index("visitor") <= 5 and len(order) == 31 and queue.waiting == 0
    [wait] = waits
    assert wait.server and wait.visitors == 0 and wait.seconds is not None and 0 <= wait.seconds < 0.5


def test_background_work_waits_for_every_visitor_in_line_and_a_visitors_job_never_lets_it_in() -> None:
    queue, order = RunQueue(), []
    holding = threading.Event()

    def run(name: str, background: bool = False, steps: int = 1) -> threading.Thread:
        def work() -> None:
            with queue.turn(background=background):
                for _ in range(steps):
                    holding.set()
                    order.append(name)
                    time.sleep(0.005)
                    queue.let_others_in()

        return threading.Thread(target=work)

    first = run("long visitor", steps=10)
    first.start()
    holding.wait()
    others = [run("warm", background=True), run("second visitor")]
    for thread in others:
        thread.start()
        while queue.waiting < others.index(thread) + 1:
            time.sleep(0.001)
    for thread in [first, *others]:
        thread.join()
    assert order.index("second visitor") < order.index("warm")  # came later, went first
    assert order.index("warm") == len(order) - 1  # the visitors' steps all ran before it


def test_a_wait_counts_the_visitors_ahead_and_estimates_from_timed_steps() -> None:
    queue, release, waits = RunQueue(), threading.Event(), []
    with queue.turn():
        time.sleep(0.02)  # one timed visitor step: later waits have an estimate

    def hold() -> None:
        with queue.turn():
            release.wait()

    def ask() -> None:
        with queue.turn(on_wait=waits.append):
            pass

    threads = [threading.Thread(target=hold), threading.Thread(target=ask), threading.Thread(target=ask)]
    for index, thread in enumerate(threads):
        thread.start()
        while queue.waiting < index and not release.is_set():  # each one in line before the next comes
            time.sleep(0.001)
        time.sleep(0.005)
    release.set()
    for thread in threads:
        thread.join()
    assert [wait.visitors for wait in waits] == [1, 2] and not any(wait.server for wait in waits)
    assert waits[0].seconds is not None and waits[1].seconds > waits[0].seconds


def test_two_callers_of_one_long_run_cost_one_run_though_it_lets_waiting_runs_in_between_its_steps() -> None:
    """The second caller gets the turn while the first pauses between steps: it waits for that run, not runs it too;
    a run that is stopped caches nothing, and the caller that waited for it runs it in its own turn."""
    cache, queue, runs, started = BoundedCache(total=MIB, per_owner=MIB), RunQueue(), [], threading.Event()

    def long_run() -> str:
        runs.append(1)
        for _ in range(20):
            started.set()
            time.sleep(0.005)
            queue.let_others_in()
        return "measured"

    found = []
    first = threading.Thread(target=lambda: found.append(cache.get_or_run("k", "a", long_run, queue)))
    first.start()
    started.wait()
    second = threading.Thread(target=lambda: found.append(cache.get_or_run("k", "b", long_run, queue)))
    second.start()
    for thread in (first, second):
        thread.join(timeout=10)
    assert found == ["measured", "measured"] and len(runs) == 1 and queue.waiting == 0

    def stopped() -> str:
        started.set()
        time.sleep(0.05)
        raise RuntimeError("stopped")

    started.clear()
    outcome = []
    stopper = threading.Thread(target=lambda: outcome.append(pytest.raises(RuntimeError, cache.get_or_run, "s", "a",
                                                                          stopped, queue)))  # fmt: skip
    stopper.start()
    started.wait()
    assert cache.get_or_run("s", "b", lambda: "rerun", queue) == "rerun"
    stopper.join(timeout=10)
    assert outcome and cache.get("s") == "rerun"


def test_waiters_are_served_in_the_order_they_came() -> None:
    queue, served = RunQueue(), []

    def wait_and_run(index: int) -> None:
        with queue.turn():
            served.append(index)

    threads = [threading.Thread(target=wait_and_run, args=(index,)) for index in range(4)]
    with queue.turn():
        for index, thread in enumerate(threads):
            thread.start()
            while queue.waiting < index + 1:  # the next one comes only after this one is in line
                time.sleep(0.001)
    for thread in threads:
        thread.join()
    assert served == [0, 1, 2, 3]


def test_a_page_that_needs_several_runs_gets_them_all_in_one_turn() -> None:
    """Three pages of three runs each, asking in turn: with a turn per run each page would wait for the others'
    runs in between, and all three would finish together at the end; with one turn, the first finishes first."""
    cache, queue, order, finished = BoundedCache(total=100 * MIB, per_owner=100 * MIB), RunQueue(), [], []

    def run(name: str) -> object:
        def compute() -> str:
            order.append(name)
            time.sleep(0.02)
            return name

        return compute

    def page(who: str) -> None:
        cache.get_or_run_all([((who, i), run(f"{who}{i}")) for i in range(3)], who, queue)
        finished.append(who)

    threads = []
    for who in "abc":
        threads.append(threading.Thread(target=page, args=(who,)))
        threads[-1].start()
        time.sleep(0.005)  # in this order
    for thread in threads:
        thread.join()
    assert order == ["a0", "a1", "a2", "b0", "b1", "b2", "c0", "c1", "c2"] and finished == ["a", "b", "c"]
    assert cache.get_or_run_all([(("a", 1), run("again"))], "a", queue) == ["a1"]  # cached: not run again


def test_a_run_that_fails_leaves_its_error_and_the_others_still_run() -> None:
    cache, queue = BoundedCache(total=MIB, per_owner=MIB), RunQueue()

    def broken() -> None:
        raise RuntimeError("out of memory")

    found = cache.get_or_run_all([("x", broken), ("y", lambda: 2)], "me", queue)
    assert isinstance(found[0], RuntimeError) and found[1] == 2
    assert cache.get("x") is None and cache.get("y") == 2  # a failure is not cached: the next visit tries again


def test_a_visitor_who_stops_or_leaves_while_in_line_holds_nobody_up() -> None:
    """Issue 54, item 3: a run waiting for its turn (or for its turn back, after letting others in) leaves the line
    once its visitor no longer wants it; the next in line gets the model, and the holder hands it to nobody else."""
    queue, stop, order, left = RunQueue(), threading.Event(), [], []
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with queue.turn():
            held.set()
            release.wait(10)
        order.append("holder")

    def leaver() -> None:
        try:
            with queue.turn(cancelled=stop.is_set):
                order.append("leaver ran")  # never: it left before its turn
        except Unwanted:
            left.append(time.monotonic())

    def next_in_line() -> None:
        with queue.turn():
            order.append("next")

    first = threading.Thread(target=holder)
    first.start()
    held.wait(10)
    waiting = [threading.Thread(target=leaver), threading.Thread(target=next_in_line)]
    for thread in waiting:
        thread.start()
        time.sleep(0.05)  # in this order
    stopped_at = time.monotonic()
    stop.set()
    waiting[0].join(10)
    assert left and left[0] - stopped_at < 3 * CHECK_EVERY  # out of the line within a check
    release.set()
    for thread in (first, waiting[1]):
        thread.join(10)
    assert order == ["holder", "next"] and queue.waiting == 0


def test_a_long_run_stopped_while_it_let_others_in_leaves_without_taking_the_model_back() -> None:
    queue, stop, outcome, served = RunQueue(), threading.Event(), [], []
    in_turn, short_holds = threading.Event(), threading.Event()

    def long_run() -> None:
        try:
            with queue.turn(cancelled=stop.is_set):
                while True:
                    in_turn.set()
                    time.sleep(0.01)
                    queue.let_others_in()  # waits for its turn back while the short run holds the model
        except Unwanted:
            outcome.append("left")

    def short_run() -> None:
        with queue.turn():
            short_holds.set()
            stop.set()  # the long run's visitor presses Stop while it waits for its turn back
            time.sleep(0.5)
            served.append("short")

    first = threading.Thread(target=long_run)
    first.start()
    in_turn.wait(10)
    together(short_run)
    first.join(10)
    assert outcome == ["left"] and served == ["short"] and queue.waiting == 0
    with queue.turn():  # the model is free: nobody holds it
        served.append("after")
    assert served == ["short", "after"]
