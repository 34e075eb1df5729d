"""Sharing one model between many visitors: one forward pass at a time, and bounded result caches."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any


class RunQueue:
    """A lock that knows how many callers wait for it, so each can be told its place."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        return self._waiting

    @contextmanager
    def turn(self, on_wait: Callable[[int], None] | None = None) -> Iterator[None]:
        """Hold the model for one run; ``on_wait(n)`` is called first if n other runs are ahead."""
        if not self._lock.acquire(blocking=False):
            with self._count:
                self._waiting += 1
                ahead = self._waiting
            if on_wait is not None:
                on_wait(ahead)
            self._lock.acquire()
            with self._count:
                self._waiting -= 1
        try:
            yield
        finally:
            self._lock.release()


class BoundedCache:
    """A thread-safe LRU cache holding at most ``total`` entries and ``per_owner`` per owner (session)."""

    def __init__(self, total: int, per_owner: int) -> None:
        self.total, self.per_owner = total, per_owner
        self._entries: OrderedDict[Hashable, tuple[Hashable, Any]] = OrderedDict()  # key -> (owner, value)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            if key not in self._entries:
                return None
            self._entries.move_to_end(key)
            return self._entries[key][1]

    def put(self, key: Hashable, value: Any, owner: Hashable) -> None:
        with self._lock:
            self._entries[key] = (owner, value)
            self._entries.move_to_end(key)
            owned = [k for k, (o, _) in self._entries.items() if o == owner]
            for old in owned[: max(0, len(owned) - self.per_owner)]:
                del self._entries[old]
            while len(self._entries) > self.total:
                self._entries.popitem(last=False)

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
