"""Fresh-process start-up times: the command line's --help and the torch-free modules against the engine.

Each row runs a new Python process (so nothing is imported yet; the OS file cache is warm after the
first repeat) and reports the median wall time of the repeats, interleaved, and whether torch was loaded.

    .venv/bin/python bench/bench_imports.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
PROBE = "; import sys; print('torch' in sys.modules)"
ROWS = {
    "sinkscope --help": [str(BIN / "sinkscope"), "--help"],
    "import sinkscope.plot": [sys.executable, "-c", "import sinkscope.plot" + PROBE],
    "import sinkscope.core.metrics": [sys.executable, "-c", "import sinkscope.core.metrics" + PROBE],
    "import sinkscope.cli": [sys.executable, "-c", "import sinkscope.cli" + PROBE],
    "import sinkscope.serving.settings": [sys.executable, "-c", "import sinkscope.serving.settings" + PROBE],
    "import sinkscope": [sys.executable, "-c", "import sinkscope" + PROBE],
    "import sinkscope.core.capture (the engine)": [sys.executable, "-c", "import sinkscope.core.capture" + PROBE],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    times: dict[str, list[float]] = {name: [] for name in ROWS}
    torch_loaded: dict[str, str] = {}
    for _ in range(repeats):
        for name, command in ROWS.items():
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            times[name].append(time.perf_counter() - start)
            torch_loaded[name] = done.stdout.strip().splitlines()[-1] if "import" in name else "False"
    print(f"| command | median of {repeats} (s) | torch loaded |\n|---|---:|---|")
    for name, found in times.items():
        print(f"| `{name}` | {statistics.median(found):.2f} | {torch_loaded[name]} |")


if __name__ == "__main__":
    main()
