"""Ray's processes end with the census driver that started them, even a driver killed with kill -9.

Ray stops what ``ray.init()`` started when the driver exits normally; killed outright, its agents and idle
workers linger until they notice (ten seconds and more). This watcher, started beside the driver in a session of
its own, notes the driver's descendants while the driver lives and kills the ones left once it is gone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import psutil

EVERY = 0.25  # seconds between looks at the driver's process tree


def start(driver: int | None = None) -> subprocess.Popen:
    """Watch ``driver`` (this process by default) from a separate process that outlives it."""
    command = [sys.executable, "-m", "sinkscope.census.reaper", str(driver or os.getpid())]
    return subprocess.Popen(command, start_new_session=True, stdin=subprocess.DEVNULL)  # Ctrl-C spares it


def watch(driver: int) -> None:
    """Note the driver's descendants until it ends, then kill those still running (psutil checks each one's
    start time, so a process that reused a pid is left alone)."""
    me, seen = os.getpid(), {}
    try:
        parent = psutil.Process(driver)
        while parent.is_running() and parent.status() != psutil.STATUS_ZOMBIE:
            seen |= {child.pid: child for child in parent.children(recursive=True) if child.pid != me}
            time.sleep(EVERY)
    except psutil.NoSuchProcess:
        pass
    for process in seen.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


if __name__ == "__main__":
    watch(int(sys.argv[1]))
