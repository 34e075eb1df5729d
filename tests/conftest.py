"""Shared fixtures: tiny random models built from config, and the real bundled model."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from sinkscope.core import attention
from sinkscope.core.bundled import DEFAULT_MODEL
from sinkscope.core.models import LoadedModel, load_model, model_info
from transformers import AutoModelForCausalLM, Gemma3TextConfig, GPT2Config, LlamaConfig

TINY_CONFIGS = {
    "llama-gqa": LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    ),
    "gpt2": GPT2Config(vocab_size=96, n_embd=64, n_layer=3, n_head=4, n_positions=512),
    "gemma3-sliding": Gemma3TextConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, sliding_window=5, max_position_embeddings=512,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ),
}  # fmt: skip


def build_tiny(name: str, implementation: str) -> torch.nn.Module:
    """A random tiny model; the same seed gives the same weights for every attention implementation."""
    attention.register()
    torch.manual_seed(0)
    config = copy.deepcopy(TINY_CONFIGS[name])  # from_config writes the implementation into its config
    model = AutoModelForCausalLM.from_config(config, attn_implementation=implementation)
    return model.eval().requires_grad_(False)


def tiny_loaded(name: str) -> LoadedModel:
    model = build_tiny(name, attention.ATTENTION_NAME)
    return LoadedModel(model, None, model_info(model, name, name))


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
    """Mark the tests of the real bundled model (the ``smollm2`` fixture): ``make check`` leaves them out."""
    for item in items:
        if "smollm2" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.bundled)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under ``pytest -n``: the tests that share a server, a process's cache or a module's Ray share a worker."""
    from tests.workers import SharedCaches

    return SharedCaches(config, log)
