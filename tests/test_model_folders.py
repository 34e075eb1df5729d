"""A model folder that is not a model: one sentence naming the file and the problem, exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import pathlib
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from sinkscope.cli.arguments import UsageError, read_text_file
from sinkscope.core.capture import analyze_ids
from sinkscope.core.errors import ModelLoadError
from sinkscope.core.models import LoadedModel, load_model, model_info

from tests.helpers import cli
from tests.tiny import build_tiny, build_word_model_dir


class RunsCode:
    """A pickle that would create ``marker`` when unpickled: what a malicious pytorch_model.bin does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return pathlib.Path.touch, (self.marker,)


def set_config(folder: Path, **values: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | values))


def replace_weights(folder: Path, write: Callable[[Path], None], name: str = "model.safetensors") -> None:
    (folder / "model.safetensors").unlink()
    write(folder / name)


def nan_weights(folder: Path) -> None:
    model = build_tiny("llama-gqa", "eager")
    model.model.layers[1].mlp.up_proj.weight.data[0, 0] = float("nan")
    model.save_pretrained(folder)


BROKEN: dict[str, tuple[Callable[[Path], None], str]] = {
    "zero layers": (lambda d: set_config(d, num_hidden_layers=0), "num_hidden_layers = 0"),
    "random safetensors": (
        lambda d: (d / "model.safetensors").write_bytes(os.urandom(5000)),
        "model.safetensors is not a readable safetensors file",
    ),
    "empty safetensors": (lambda d: (d / "model.safetensors").write_bytes(b""), "model.safetensors is empty"),
    "a pickle of code": (
        lambda d: replace_weights(d, lambda f: torch.save({"w": RunsCode(d / "ran")}, f), "pytorch_model.bin"),
        "pytorch_model.bin holds Python objects besides tensors",
    ),
    "weights of another model": (
        lambda d: replace_weights(d, lambda f: torch.save({"w": torch.zeros(2)}, f), "pytorch_model.bin"),
        "30 weights that config.json asks for are not in the weight files",
    ),
    "wrong shapes": (lambda d: set_config(d, hidden_size=128), "weights do not have the shape config.json gives"),
    "no tokenizer": (lambda d: [f.unlink() for f in d.glob("tokenizer*")], "has no tokenizer"),
    "weights that are a folder": (lambda d: replace_weights(d, Path.mkdir), "model.safetensors: Is a directory"),
    "NaN weights": (nan_weights, "model.layers.1.mlp.up_proj.weight holds NaN or infinite values"),
    "heads that do not divide the width": (  # issue 54, item 13: transformers' validator, as one line
        lambda d: set_config(d, num_attention_heads=5, num_key_value_heads=5, head_dim=None),
        "is not a multiple of the number of attention heads",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_model_folder_is_one_line_naming_file_and_problem(tmp_path: Path, case: str) -> None:
    folder = build_word_model_dir(tmp_path / "model")
    damage, message = BROKEN[case]
    damage(folder)
    with pytest.raises(ModelLoadError, match=message.replace(".", r"\.")):
        load_model(str(folder))
    done = cli("analyze", "--model", str(folder), "--text", "the sink")
    assert done.returncode == 2 and message in done.stderr
    said = [line for line in done.stderr.splitlines() if not line.startswith("Loading ")]  # the progress line
    assert len(said) == 1 and said[0].startswith("error:") and message in said[0]
    assert not (folder / "ran").exists()


def test_weights_that_cannot_be_read_say_so_not_no_such_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_word_model_dir(tmp_path)
    opened = Path.open

    def refuse(path: Path, *args: object, **kwargs: object) -> object:
        if path.name == "model.safetensors":
            raise PermissionError(13, "Permission denied")  # what chmod 000 does to a user other than root
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(ModelLoadError, match="Cannot read .*model.safetensors: Permission denied"):
        load_model(str(folder))


@pytest.mark.parametrize("relative", [False, True])
def test_a_symlink_loop_is_a_local_path_never_a_hub_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool
) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop")
    monkeypatch.chdir(tmp_path)
    spec = "loop/model" if relative else str(tmp_path / "loop")  # "loop/model" has a hub id's shape
    with pytest.raises(ModelLoadError, match="Cannot open the model folder .*: Too many levels of symbolic links"):
        load_model(spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("/no/such/model", "Cannot open the model folder /no/such/model: No such file or directory"),
        ("./missing-model", "No such file or directory"),
        ("x" * 5000, "Unknown model 'xxxx"),
        ("/" + "x" * 5000, "File name too long"),
    ],
)
def test_a_path_that_is_not_there_is_named_shortly(spec: str, message: str) -> None:
    done = cli("analyze", "--model", spec, "--text", "the sink")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr) < 400  # a 5,000-character name is cut, not repeated


def test_a_file_is_not_a_model_folder(tmp_path: Path) -> None:
    folder = build_word_model_dir(tmp_path)
    with pytest.raises(ModelLoadError, match="config.json is a file, not a model folder"):
        load_model(str(folder / "config.json"))


def test_hidden_states_that_overflow_stop_the_analysis() -> None:
    model = build_tiny("llama-gqa", "sinkscope")
    for weight in (model.model.layers[1].mlp.up_proj.weight, model.model.layers[1].mlp.down_proj.weight):
        weight.data.fill_(1e38)  # finite weights whose products are not
    loaded = LoadedModel(model, None, model_info(model, "overflow", "overflow"))
    with pytest.raises(ModelLoadError, match=r"h² holds NaN or infinite values in float32"):
        analyze_ids(loaded, [5, 6, 7, 8])


def test_a_text_file_may_be_a_pipe_and_a_folder_is_named(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("the sink takes attention", encoding="utf-8"))
    writer.start()
    assert read_text_file(str(fifo)) == "the sink takes attention"
    writer.join()
    with pytest.raises(UsageError, match="it is a folder"):
        read_text_file(str(tmp_path))
