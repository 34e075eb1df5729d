"""Shared fixtures: tiny random models built from config, and the real bundled model."""

from __future__ import annotations

import numpy as np
import pytest
from sinkscope.core.bundled import DEFAULT_MODEL
from sinkscope.core.models import LoadedModel, load_model

from tests.tiny import TINY_CONFIGS


@pytest.fixture(params=list(TINY_CONFIGS))
def tiny_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def random_ids() -> list[int]:
    return np.random.default_rng(1).integers(0, 96, size=37).tolist()


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    return load_model(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A local model directory holding a tiny random model: for app tests of the interface, not the numbers."""
    from tests.tiny import build_tiny_model_dir

    return str(build_tiny_model_dir(tmp_path_factory.mktemp("tiny-model")))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of the real bundled model (the ``smollm2`` fixture) and the browser tests: ``make check``
    leaves them out."""
    for item in items:
        if "smollm2" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.bundled)
        if "tests/browser/" in item.nodeid:
            item.add_marker(pytest.mark.browser)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under ``pytest -n``: the tests that share a server, a process's cache or a module's Ray share a worker."""
    from tests.workers import SharedCaches

    return SharedCaches(config, log)
