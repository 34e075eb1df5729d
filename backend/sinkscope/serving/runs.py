"""Sharing one model between many visitors: one forward pass at a time, and result caches bounded by bytes."""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


class RunQueue:
    """A first-come, first-served lock that tells each waiter its place; a long job lets waiting runs go
    first between its steps (``let_others_in``), so one visitor's streaming sweep never holds up another's
    short analysis for more than one step."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next_ticket = 0  # the ticket the next caller takes
        self._serving = 0  # the ticket whose holder runs now

    @property
    def waiting(self) -> int:
        with self._changed:
            return max(0, self._next_ticket - self._serving - 1)

    def _wait_in_line(self) -> None:
        """Take the next ticket and wait for it (``self._changed`` held)."""
        ticket = self._next_ticket
        self._next_ticket += 1
        while self._serving != ticket:
            self._changed.wait()

    def _pass_on(self) -> None:
        self._serving += 1
        self._changed.notify_all()

    @contextmanager
    def turn(self, on_wait: Callable[[int], None] | None = None) -> Iterator[RunQueue]:
        """Hold the model for one run; ``on_wait(n)`` is called first if n other runs are ahead."""
        with self._changed:
            ahead = self._next_ticket - self._serving
        if ahead and on_wait is not None:
            on_wait(ahead)
        with self._changed:
            self._wait_in_line()
        try:
            yield self
        finally:
            with self._changed:
                self._pass_on()

    def let_others_in(self) -> None:
        """Called by the holder between steps: runs that waited go first, then the holder's turn comes back."""
        with self._changed:
            if self._next_ticket - self._serving > 1:
                self._pass_on()
                self._wait_in_line()


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


class BoundedCache:
    """A thread-safe LRU cache bounded by bytes: ``total`` in all and ``per_owner`` per owner (session).

    The entry just stored always stays (its session is about to show it), however large.
    """

    def __init__(self, total: int, per_owner: int) -> None:
        self.total, self.per_owner = total, per_owner
        self._entries: OrderedDict[Hashable, tuple[Hashable, Any, int]] = OrderedDict()  # key -> (owner, value, size)
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
        """The cached value, or ``run()`` under the queue (checking again once it is this caller's turn)."""
        found = self.get(key)
        if found is not None:
            return found
        with queue.turn(**turn):
            found = self.get(key)
            if found is None:
                found = run()
                self.put(key, found, owner)
        return found

    def get_or_run_all(
        self, runs: list[tuple[Hashable, Callable[[], Any]]], owner: Hashable, queue: RunQueue, **turn: Any
    ) -> list[Any]:
        """Each (key, run)'s cached value, the missing ones run in one turn of ``queue``: a page that needs several
        runs waits in line once, so with a class, whoever asked first gets all of theirs first (a turn per run
        would let every waiting page in between, and the whole class would finish together, at the end).

        A run that raises leaves its exception in its place, and the others still run.
        """
        found = [self.get(key) for key, _ in runs]
        if all(value is not None for value in found):
            return found
        with queue.turn(**turn):
            for index, (key, run) in enumerate(runs):
                found[index] = self.get(key)
                if found[index] is None:
                    try:
                        found[index] = run()
                    except Exception as err:  # noqa: BLE001  (the caller says why each run failed)
                        found[index] = err
                        continue
                    self.put(key, found[index], owner)
        return found
