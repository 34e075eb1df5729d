"""Load test on loopback: 16 sessions on one app process, each with its own text, at once.

Each session speaks the browser's websocket protocol (what the server sees of a class of laptops, without 16
Chromium pages on this machine's two cores): it opens a shared link with its own text, reads the sink rate's
label and downloads the per-head CSV the page offers. Every session must get its own tokens and metrics back
(no mix-ups between threads), the process must survive, and the figures (sessions, runs, failures, peak memory,
waits) are written to test-results/load.txt.
"""

from __future__ import annotations

import asyncio
import csv
import io
import statistics
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import numpy as np
import websockets
from sinkscope.core.capture import analyze
from sinkscope.core.models import LoadedModel
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from tests.browser.helpers import ARTIFACTS

SESSIONS = 16
LOAD_S = 240
SUBJECTS = ["lighthouse", "river", "violin", "glacier", "market", "comet", "orchard", "harbor",
            "canyon", "lantern", "meadow", "falcon", "bakery", "compass", "volcano", "library"]  # fmt: skip


def session_text(index: int) -> str:
    subject = SUBJECTS[index]
    return f"Session {index} writes about the {subject}. " + " ".join([subject] * (index + 1))


def peak_memory_gb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 2**20


async def one_session(url: str, index: int) -> tuple[float, str, str]:
    """Open a shared link with this session's text; return (wait in s, the 'T =' label, heads CSV)."""
    start = time.monotonic()
    stream = url.replace("http://", "ws://") + "/_stcore/stream"
    async with websockets.connect(stream, subprotocols=["streamlit"], origin=url, max_size=None) as socket:
        ask = BackMsg()
        ask.rerun_script.query_string = f"text={quote(session_text(index))}"
        await socket.send(ask.SerializeToString())
        label, download = "", ""
        while True:
            message = ForwardMsg.FromString(await asyncio.wait_for(socket.recv(), LOAD_S))
            element = message.delta.new_element
            if element.HasField("metric") and "T =" in element.metric.label:
                label = element.metric.label
            if element.HasField("download_button") and element.download_button.label == "Per-head CSV":
                download = element.download_button.url
            if message.HasField("script_finished"):
                break
    waited = time.monotonic() - start
    with urllib.request.urlopen(url + download, timeout=LOAD_S) as reply:  # the file the button serves
        return waited, label, reply.read().decode("utf-8")


async def run_sessions(url: str) -> list[tuple[float, str, str] | BaseException]:
    return await asyncio.gather(*(one_session(url, i) for i in range(SESSIONS)), return_exceptions=True)


def sink_column(heads_csv: str) -> np.ndarray:
    return np.array([float(row["sink"]) for row in csv.DictReader(io.StringIO(heads_csv))])


def test_sixteen_concurrent_sessions_each_get_their_own_results(
    app_server: tuple[str, subprocess.Popen], smollm2: LoadedModel
) -> None:
    url, process = app_server
    with ThreadPoolExecutor(1) as thread:  # its own event loop: pytest-playwright's sync API may hold this one
        results = thread.submit(asyncio.run, run_sessions(url)).result()
    assert process.poll() is None, "the app process died"
    failures = [r for r in results if isinstance(r, BaseException)]
    waits = [r[0] for r in results if not isinstance(r, BaseException)]
    report = (
        f"sessions {SESSIONS}, runs {len(waits)}, failures {len(failures)}, "
        f"peak memory {peak_memory_gb(process.pid):.2f} GB, "
        f"wait median {statistics.median(waits) if waits else float('nan'):.1f} s, worst {max(waits, default=0):.1f} s"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "load.txt").write_text(report + "\n")
    print(report)
    assert not failures, failures
    for index, (_, label, heads_csv) in enumerate(results):
        expected = analyze(smollm2, session_text(index))
        assert f"T = {expected.n_tokens})" in label, (index, label)
        np.testing.assert_allclose(sink_column(heads_csv), expected.heads["sink"].ravel(), atol=1e-6)
