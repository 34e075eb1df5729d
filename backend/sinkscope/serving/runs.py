"""Sharing one model between many visitors: one forward pass at a time, and result caches bounded by bytes."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np

STEPS_KEPT = 20  # the recent steps whose median predicts the next one's length
CHECK_EVERY = 0.2  # seconds: how often a run waiting in line asks whether its visitor still wants it
Cancelled = Callable[[], bool]  # -> has the caller's visitor pressed Stop, changed the page or left?


class Unwanted(Exception):
    """A run left the line before its turn: its visitor no longer wants it (``Cancelled`` said so)."""


class Wait(NamedTuple):
    """What a run joining the line waits for: visitors' runs ahead of it (the one running included), whether the
    server's own background work holds the model now, and about how many seconds until its turn (None until runs of
    each kind ahead have been timed)."""

    visitors: int
    server: bool
    seconds: float | None


class _Ticket:
    """One caller of ``RunQueue.turn``; ``background`` marks the server's own work (the warm start); ``cancelled``
    (None: never) lets it leave the line while it waits."""

    def __init__(self, background: bool, cancelled: Cancelled | None = None) -> None:
        self.background, self.cancelled = background, cancelled


class RunQueue:
    """A lock for one model. Visitors' runs are served first come, first served; the server's own background work
    (the warm start) gets the model only while no visitor waits. A long job lets waiting runs go first between its
    steps (``let_others_in``): one visitor's streaming sweep never holds up another's short analysis for more than
    one step, and the warm start holds a visitor for at most one of its steps (a visitor's job never lets the
    background work in)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._lines: dict[bool, deque[_Ticket]] = {False: deque(), True: deque()}  # background? -> tickets in line
        self._holder: _Ticket | None = None
        self._since = 0.0  # when the holder's current step began (time.monotonic)
        self._steps: dict[bool, deque[float]] = {kind: deque(maxlen=STEPS_KEPT) for kind in (False, True)}

    @property
    def waiting(self) -> int:
        with self._changed:
            return sum(map(len, self._lines.values()))

    def _step(self, background: bool) -> float | None:
        steps = self._steps[background]
        return float(np.median(steps)) if steps else None

    def _wait(self, background: bool) -> Wait | None:
        """What a run of that kind would wait for if it joined now (``self._changed`` held); None: nothing."""
        if self._holder is None:
            return None
        ahead = [*self._lines[False], *(self._lines[True] if background else ())]
        server = self._holder.background
        visitors = (not server) + sum(not ticket.background for ticket in ahead)
        steps = [self._step(ticket.background) for ticket in (self._holder, *ahead)]
        if None in steps:
            return Wait(visitors, server, None)
        current = max(0.0, steps[0] - (time.monotonic() - self._since))
        return Wait(visitors, server, current + sum(steps[1:]))

    def _join(self, ticket: _Ticket) -> None:
        """Take the model now if it is free, else wait in ``ticket``'s line until it is handed over; Unwanted
        (out of the line) once its ``cancelled`` says so."""
        if self._holder is None:
            self._holder, self._since = ticket, time.monotonic()
            return
        self._lines[ticket.background].append(ticket)
        while self._holder is not ticket:
            self._changed.wait(CHECK_EVERY if ticket.cancelled is not None else None)
            if self._holder is not ticket and ticket.cancelled is not None and ticket.cancelled():
                self._lines[ticket.background].remove(ticket)
                raise Unwanted

    def _end_step(self) -> None:
        """Time the holder's step that ends now; the next one starts."""
        now = time.monotonic()
        self._steps[self._holder.background].append(now - self._since)
        self._since = now

    def _hand_over(self) -> None:
        """Give the model to the first visitor waiting, else to background work."""
        line = self._lines[False] or self._lines[True]
        self._holder = line.popleft() if line else None
        self._changed.notify_all()

    @contextmanager
    def turn(self, on_wait: Callable[[Wait], None] | None = None, background: bool = False,
             cancelled: Cancelled | None = None) -> Iterator[RunQueue]:  # fmt: skip
        """Hold the model for one run; ``on_wait`` is told first what the run waits for, if anything. A run whose
        ``cancelled`` says so while it waits for its turn (or for its turn back, after ``let_others_in``) leaves
        the line with Unwanted: a visitor who pressed Stop or left holds nobody up."""
        ticket = _Ticket(background, cancelled)
        with self._changed:
            wait = self._wait(background)
        if wait is not None and on_wait is not None:
            on_wait(wait)
        with self._changed:
            self._join(ticket)
        try:
            yield self
        finally:
            with self._changed:
                if self._holder is ticket:  # not when it left the line waiting for its turn back
                    self._end_step()
                    self._hand_over()

    def let_others_in(self) -> None:
        """Called by the holder between steps: visitors' runs that wait go first (and, for background work, other
        background work), then the holder's turn comes back."""
        with self._changed:
            holder = self._holder
            self._end_step()
            if self._lines[False] or (holder.background and self._lines[True]):
                self._hand_over()
                self._join(holder)


def nbytes(value: Any, seen: set[int] | None = None) -> int:
    """About how much memory ``value`` holds: arrays and tensors by their buffers, containers by content."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return value.nbytes if value.base is None else nbytes(value.base, seen)
    if hasattr(value, "element_size") and hasattr(value, "nelement"):  # a torch tensor, without importing torch
        return value.element_size() * value.nelement()
    if isinstance(value, dict):
        return sum(nbytes(k, seen) + nbytes(v, seen) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return sys.getsizeof(value) + sum(nbytes(item, seen) for item in value)
    if hasattr(value, "memory_usage") and hasattr(value, "columns"):  # a pandas table: its strings counted too
        return int(value.memory_usage(deep=True).sum())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__"):
        return nbytes(vars(value), seen)
    return sys.getsizeof(value)


def _wait_for(done: threading.Event, cancelled: Cancelled | None) -> None:
    """Until another caller's run of the same key ends; Unwanted once ``cancelled`` says so."""
    while not done.wait(CHECK_EVERY):
        if cancelled is not None and cancelled():
            raise Unwanted


class BoundedCache:
    """A thread-safe LRU cache bounded by bytes: ``total`` in all and ``per_owner`` per owner (session).

    The entry just stored always stays (its session is about to show it), however large.
    """

    def __init__(self, total: int, per_owner: int) -> None:
        self.total, self.per_owner = total, per_owner
        self._entries: OrderedDict[Hashable, tuple[Hashable, Any, int]] = OrderedDict()  # key -> (owner, value, size)
        self._running: dict[Hashable, threading.Event] = {}  # key -> set when the run computing it ends
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """Bytes held now."""
        with self._lock:
            return sum(size for _, _, size in self._entries.values())

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            if key not in self._entries:
                return None
            self._entries.move_to_end(key)
            return self._entries[key][1]

    def put(self, key: Hashable, value: Any, owner: Hashable) -> None:
        size = nbytes(value)
        with self._lock:
            self._entries[key] = (owner, value, size)
            self._entries.move_to_end(key)
            self._evict(lambda o: o == owner, self.per_owner, keep=key)
            self._evict(lambda _: True, self.total, keep=key)

    def _evict(self, counts: Callable[[Hashable], bool], limit: int, keep: Hashable) -> None:
        """Drop the least recently used entries that ``counts`` until those left fit in ``limit`` bytes."""
        held = sum(size for owner, _, size in self._entries.values() if counts(owner))
        for key in [k for k, (owner, _, _) in self._entries.items() if counts(owner) and k != keep]:
            if held <= limit:
                return
            held -= self._entries.pop(key)[2]

    def get_or_run(self, key: Hashable, owner: Hashable, run: Callable[[], Any], queue: RunQueue, **turn: Any) -> Any:
        """The cached value, or ``run()`` under the queue, once for every caller: checked again once it is this
        caller's turn, and a caller whose key another one is computing (paused between its steps, which let waiting
        runs in) waits for that run outside the queue instead of running it too. A run that raises (stopped,
        failed) caches nothing, and whoever waited for it runs it in their own turn."""
        while True:
            found = self.get(key)
            if found is not None:
                return found
            with self._lock:
                running = self._running.get(key)
            if running is not None:
                _wait_for(running, turn.get("cancelled"))
                continue
            with queue.turn(**turn):
                found, done = self._claim(key)
                if done is None:  # cached or claimed between the two checks: look again
                    continue
                try:
                    found = run()
                    self.put(key, found, owner)
                    return found
                finally:
                    with self._lock:
                        del self._running[key]
                    done.set()

    def _claim(self, key: Hashable) -> tuple[Any, threading.Event | None]:
        """(the cached value, None), (None, None) if another caller computes it, else (None, the event this caller
        sets when its run ends)."""
        with self._lock:
            if key in self._entries:
                return self._entries[key][1], None
            if key in self._running:
                return None, None
            done = self._running[key] = threading.Event()
            return None, done

    def get_or_run_all(
        self, runs: list[tuple[Hashable, Callable[[], Any]]], owner: Hashable, queue: RunQueue,
        on_each: Callable[[int, Any], None] | None = None, **turn: Any,
    ) -> list[Any]:  # fmt: skip
        """Each (key, run)'s cached value, the missing ones run in one turn of ``queue``: a page that needs several
        runs waits in line once, so with a class, whoever asked first gets all of theirs first (a turn per run
        would let every waiting page in between, and the whole class would finish together, at the end).

        A run that raises leaves its exception in its place, and the others still run. ``on_each(index, value)``
        hears each value as it lands, in order, cached ones included.
        """
        landed = on_each or (lambda index, value: None)
        found = [self.get(key) for key, _ in runs]
        if all(value is not None for value in found):
            for index, value in enumerate(found):
                landed(index, value)
            return found
        with queue.turn(**turn):
            for index, (key, run) in enumerate(runs):
                found[index] = self.get(key)
                if found[index] is None:
                    try:
                        found[index] = run()
                    except Exception as err:  # noqa: BLE001  (the caller says why each run failed)
                        found[index] = err
                    else:
                        self.put(key, found[index], owner)
                landed(index, found[index])
        return found
