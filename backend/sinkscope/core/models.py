"""Which models Sinkscope can open, and how: bundled GGUF packages, hub ids, local directories."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import operator
import os
import pickle
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from filelock import FileLock
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING,
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
)
from transformers.utils import logging as hf_logging

from sinkscope.core import attention, capabilities, slow
from sinkscope.core.bundled import BUNDLED, BundledModel, cache_root, shown_label
from sinkscope.core.capabilities import Can
from sinkscope.core.errors import InputError, ModelLoadError, TokenLimitError, reason_of, shortened
from sinkscope.core.families import Family, check_supported, declared, family_of, supported_names
from sinkscope.core.folders import check_files, check_folder, looks_local
from sinkscope.core.hooks import decoder_layers, install_residual_hooks
from sinkscope.core.i18n import Text
from sinkscope.core.probe import PROBE_IDS, find_family
from sinkscope.core.tokens import encode
from sinkscope.core.writes import Writes

log = logging.getLogger(__name__)

HARD_TOKEN_LIMIT = 8192
ORPHAN_SECONDS = 3600
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
Progress = Callable[[str], None]
T = TypeVar("T")
LOAD_ERRORS = (OSError, ValueError, ImportError, RuntimeError, SafetensorError, pickle.UnpicklingError,
               StrictDataclassError)  # fmt: skip


@dataclass(frozen=True)
class ModelInfo:
    name: str
    label: str
    dtype: str
    device: str
    attention: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    max_tokens: int
    family: str = "Llama"  # sinkscope.core.families: the adapter this model is measured with
    family_found: bool = False  # its structure found in the module tree at load, not declared by a record
    attention_layers: tuple[int, ...] | None = None  # a hybrid's layers with attention; None: every layer
    slow_path: bool = False  # its maps come from transformers' eager attention (``core.slow``), not the kernel

    def attends(self, layer: int) -> bool:
        """Whether ``layer`` has attention heads to measure (a hybrid's Mamba or linear layers have none)."""
        return self.attention_layers is None or layer in self.attention_layers

    def badge(self, lang: str = "en") -> str:
        """The model's one-line description in ``lang``: the label's and the attention's own words translated."""
        tr = Text(lang)
        label = shown_label(self.label, lang)
        kernel = tr("badge.attention") if self.attention == attention.ATTENTION_LABEL else self.attention
        badge = tr("badge", label=label, dtype=self.dtype, device=self.device, attention=kernel)
        badge += tr("badge.slow", family=self.family) if self.slow_path else ""
        return badge + tr("badge.found", family=self.family) if self.family_found else badge


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for ``analyze``: its family found once and its residual hooks installed once, here. Shared
    across threads: nothing in it changes after loading."""

    model: Any
    tokenizer: Any
    info: ModelInfo
    family: Family = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", find_family(self.model))
        install_residual_hooks(self.model, self.family)

    def refusal(self, capability: Can) -> ModelLoadError | None:
        """Why this model cannot do ``capability`` here (``core.capabilities``), or None."""
        return capabilities.refusal(self, capability)

    def require(self, capability: Can) -> None:
        """Raise ``refusal(capability)``, where there is one: before an experiment runs anything."""
        refused = self.refusal(capability)
        if refused is not None:
            raise refused

    @property
    def blocks(self) -> torch.nn.ModuleList:
        """The decoder blocks, one per layer."""
        return decoder_layers(self.model, self.family)

    def recorder(self, **kwargs: Any) -> attention.Recorder:
        """A recorder for this model's forward passes (``attention.Recorder``'s fields), its family filled in."""
        return attention.Recorder(family=self.family, **kwargs)

    def stream_buffer(self, n_tokens: int) -> np.ndarray:
        """Room for the residual stream h^0 .. h^L of an ``n_tokens`` forward, (layer + 1, token, d_model) float32:
        a recorder's ``residual``, filled by the residual hooks (NaN where a forward stopped before a layer)."""
        width = self.model.config.get_text_config().hidden_size
        return np.full((self.info.n_layers + 1, n_tokens, width), np.nan, dtype=np.float32)

    @property
    def has_writes(self) -> bool:
        """Whether every block's attention and MLP writes are hooked (``core.writes``: not a hybrid's blocks)."""
        return bool(getattr(self.model, "_sinkscope_writes", False))

    def writes_buffer(self, n_tokens: int) -> Writes | None:
        """Room for an ``n_tokens`` forward's block writes (a recorder's ``writes``); None where they are not hooked."""
        if not self.has_writes or self.family.slow:
            return None
        return Writes.empty(self.info.n_layers, n_tokens, self.model.config.get_text_config().hidden_size)

    def check_length(self, n_tokens: int) -> None:
        """The one token limit: ``n_tokens`` over the model's is a TokenLimitError, before any work."""
        if n_tokens > self.info.max_tokens:
            raise TokenLimitError(n_tokens, self.info.max_tokens)

    def encode(
        self, text: str, max_tokens: int | None = None, truncate: bool = False, add_bos: bool | None = None
    ) -> list[int]:
        """Token ids of ``text`` under the model's limit (or a lower ``max_tokens``); ``add_bos`` None follows the
        tokenizer's default. Over the limit: a TokenLimitError, or the first tokens if ``truncate``."""
        limit = self.info.max_tokens if max_tokens is None else min(max_tokens, self.info.max_tokens)
        return encode(self.tokenizer, text, limit, truncate=truncate, add_bos=add_bos)


def require_loaded(value: object) -> LoadedModel:
    """``value`` itself when it is a model from ``load_model``; a TypeError that says what to do otherwise."""
    if not isinstance(value, LoadedModel):
        shown = repr(value) if isinstance(value, str) else type(value).__name__
        raise TypeError(
            f"expected a model loaded with sinkscope.load_model(...), got {shown}: "
            f"call model = sinkscope.load_model('smollm2-135m') (or a hub id or folder) and pass model"
        )
    if value.model.device.type == "meta":  # weights without data: every forward would fail deep inside torch
        raise ModelLoadError("error.model_meta")
    return value


def token_id(value: object) -> int | None:
    """A token id as a Python int (a NumPy integer or a one-number integer tensor included); None for anything
    else, a bool included (True is not token 1)."""
    if isinstance(value, bool | np.bool_) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_ids(loaded: LoadedModel, ids: list[int]) -> None:
    """Token ids the model's embedding holds: an id past the vocabulary is the caller's to fix, not an IndexError."""
    vocab = loaded.model.get_input_embeddings().num_embeddings
    bad = next((i for i in ids if token_id(i) is None or not 0 <= token_id(i) < vocab), None)
    if bad is not None:
        shown = str(token_id(bad)) if token_id(bad) is not None else repr(bad)  # tensor(504) reads as 504
        raise InputError("error.token_id", id=shown, last=vocab - 1)


def available_devices() -> list[str]:
    """The devices this machine can run on, the fastest first."""
    found = ["cuda"] if torch.cuda.is_available() else []
    found += ["mps"] if torch.backends.mps.is_available() else []
    return [*found, "cpu"]


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> the fastest device here; a device this machine lacks is a ModelLoadError naming those it has."""
    available = available_devices()
    if device == "auto":
        return available[0]
    if device not in available:
        raise ModelLoadError("error.device", device=device, available=", ".join(available))
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """float32 on CPU and MPS; bfloat16 on CUDA unless the user picks another."""
    if dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ModelLoadError("error.unknown_dtype", dtype=dtype, choices=", ".join(DTYPES))
    return DTYPES[dtype]


def dequantized_dir(key: str, progress: Progress = log.info) -> Path:
    """The float32 copy of a bundled GGUF, built once (about 15 s) and reused on later starts."""
    bundled = BUNDLED[key]
    version = importlib.metadata.version(bundled.distribution)
    target = cache_root() / "dequantized" / f"{bundled.key}-{version}"
    _remove_orphans(target.parent, f".{bundled.key}-")
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.parent / f".{bundled.key}.lock"):  # a concurrent first start waits, then reads this copy
        if not (target / "config.json").exists():
            progress(f"First start: dequantizing {bundled.label} (about 15 s, cached afterwards)…")
            _dequantize(bundled, target)
    return target


def _dequantize(bundled: BundledModel, target: Path) -> None:
    """Write the bundled GGUF's model and tokenizer as float32 safetensors into ``target``, all at once."""
    gguf = bundled.locate_gguf()
    with _gguf_parsed_once():
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # the weights are plain float32 now; transformers refuses to save "gguf" models
    del model.config.quantization_config
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{bundled.key}-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)  # atomic: a reader without the lock never sees half a folder
    except OSError as err:
        raise ModelLoadError("error.cache_unusable", path=str(target.parent), reason=str(err)) from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_GGUF_PATCH = threading.Lock()


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within: each GGUF file's header is parsed once, and gguf's tensor-name table built once per architecture.
    transformers parses the header for the config, the weights and the tokenizer (its 49k-token vocabulary: about
    4 s each here) and rebuilds the name table for every module (397 times); both are read-only to it."""
    import gguf

    with _GGUF_PATCH:
        saved = gguf.GGUFReader, gguf.get_tensor_name_map
        gguf.GGUFReader, gguf.get_tensor_name_map = functools.cache(saved[0]), functools.cache(saved[1])
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = saved


def _remove_orphans(folder: Path, prefix: str) -> None:
    """Staging folders that a crashed first start left behind (an hour old: a running one is younger)."""
    for orphan in folder.glob(prefix + "*"):
        if orphan.is_dir() and time.time() - orphan.stat().st_mtime > ORPHAN_SECONDS:
            log.info("Removing %s, left by an interrupted first start", orphan)
            shutil.rmtree(orphan, ignore_errors=True)


def _source_of(spec: str, progress: Progress) -> tuple[str, str]:
    """(where from_pretrained reads, the label to show) for a bundled key, a directory or a hub id."""
    if not isinstance(spec, str):
        raise InputError("error.argument_type", name="spec", value=type(spec).__name__, expected="a model name")
    spec = spec.strip()
    if spec in BUNDLED:
        bundled = BUNDLED[spec]
        if not bundled.installed():
            raise ModelLoadError("error.not_installed", spec=spec, install=bundled.install)
        return str(dequantized_dir(spec, progress)), bundled.label
    if looks_local(spec):  # a path that does not exist here is the user's to fix, never a hub id to try
        path = Path(spec).expanduser()
        check_folder(path)
        return str(path), path.name
    if HUB_ID.match(spec):
        return spec, spec
    raise ModelLoadError("error.unknown_model", spec=shortened(spec), names=", ".join(BUNDLED))


def _check_causal_lm(source: str, spec: str) -> Any:
    """The config of a causal language model Sinkscope can measure, once its folder's files are found sound."""
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
    except OSError as err:
        raise ModelLoadError("error.cannot_open", spec=spec, reason=reason_of(err)) from err
    except ValueError as err:
        if "trust_remote_code" in str(err):
            raise ModelLoadError("error.remote_code", spec=spec) from err
        raise ModelLoadError("error.cannot_open", spec=spec, reason=reason_of(err)) from err
    except StrictDataclassError as err:  # a config transformers' own validators reject (heads that do not divide)
        reason = reason_of(err).rsplit("Error: ", 1)[-1]  # the validator's sentence, not its wrapper's
        raise ModelLoadError("error.cannot_open", spec=spec, reason=reason) from err
    causal_names = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    declared = getattr(config, "architectures", None) or []
    is_causal = (
        any(name in causal_names for name in declared) if declared else type(config) in MODEL_FOR_CAUSAL_LM_MAPPING
    )
    if not is_causal:
        raise ModelLoadError("error.not_causal", spec=spec, model_type=config.model_type)
    n_layers = getattr(config.get_text_config(), "num_hidden_layers", None)
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ModelLoadError("error.no_layers_config", spec=spec, value=repr(n_layers))
    check_supported(config)
    if Path(source).is_dir():  # a hub id's files are transformers' to fetch and check
        check_files(Path(source))
    return config


def token_limit(config: Any) -> int:
    """The most tokens Sinkscope analyzes at once with a model of this config."""
    positions = getattr(config.get_text_config(), "max_position_embeddings", None) or HARD_TOKEN_LIMIT
    return min(positions, HARD_TOKEN_LIMIT)


def load_tokenizer(spec: str) -> tuple[Any, int]:
    """A model's tokenizer and token limit without its weights (the census cuts windows with them)."""
    source, _ = _source_of(spec, log.info)
    config = _check_causal_lm(source, spec)
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False), token_limit(config)
    except (OSError, ValueError, ImportError) as err:
        raise ModelLoadError("error.cannot_load", spec=spec, reason=reason_of(err)) from err


def model_info(model: Any, name: str, label: str) -> ModelInfo:
    """What the UI and CLI show about a loaded model."""
    config = model.config.get_text_config()
    n_heads, limit = config.num_attention_heads, token_limit(model.config)
    family = family_of(model.config)
    return ModelInfo(
        name=name,
        label=label,
        dtype=str(model.dtype).removeprefix("torch."),
        device=str(model.device),
        attention="eager" if family.slow else attention.ATTENTION_LABEL,
        n_layers=config.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=getattr(config, "num_key_value_heads", None) or n_heads,
        max_tokens=slow.token_limit(model.config, limit) if family.slow else limit,
        family=family.name,
        slow_path=family.slow,
        family_found=family.found,
        attention_layers=family.attention_layers,
    )


def lay_out_for_decoding(model: torch.nn.Module) -> None:
    """Give every weight memory of its own, each Linear weight transposed: the same values and shapes.

    A one-token step (streaming, generation) multiplies one or two rows by every weight; on a CPU, MKL reads a
    weight laid out (in, out) about twice as fast for so few rows, and a whole text's forward costs the same.
    Copying every weight (not only those) also lets go of the model file's memory map, which stays resident
    while any tensor points into it. Tied weights (the embedding and the output head) stay one parameter.
    """
    linear = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    moved: dict[int, tuple[torch.nn.Parameter, torch.nn.Parameter]] = {}  # id -> (old, new): old kept alive
    for module in model.modules():
        for name, old in list(module.named_parameters(recurse=False)):
            if id(old) not in moved:
                data = old.detach()
                copy = data.T.contiguous().T if id(old) in linear else data.clone()
                moved[id(old)] = (old, torch.nn.Parameter(copy, requires_grad=False))
            setattr(module, name, moved[id(old)][1])


def load_model(
    spec: str,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
) -> LoadedModel:
    """Open a bundled model key, a local model directory or a hub id, ready for ``analyze``."""
    progress = progress or log.info
    attention.register()
    device = resolve_device(device)  # before any work: a missing device is the user's to fix
    torch_dtype = resolve_dtype(dtype, device)
    source, label = _source_of(spec, progress)
    config = _check_causal_lm(source, spec)
    progress(f"Loading {label} on {device}…")
    try:
        with _loading_quietly():
            model, report = with_sinkscope_attention(
                lambda: AutoModelForCausalLM.from_pretrained(
                    source,
                    dtype=torch_dtype,
                    attn_implementation=implementation_for(config),
                    trust_remote_code=False,
                    ignore_mismatched_sizes=True,  # reported below as one sentence, not transformers' table
                    output_loading_info=True,
                ),
                config.model_type,
            )
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    except LOAD_ERRORS as err:
        raise ModelLoadError("error.cannot_load", spec=spec, reason=reason_of(err)) from err
    check_weights(model, report, spec)
    model.to(device).eval().requires_grad_(False)
    if device == "cpu":
        lay_out_for_decoding(model)
    check_capture(model)
    return LoadedModel(model, tokenizer, model_info(model, spec, label))


def implementation_for(config: Any) -> str:
    """The attention a model is built with: Sinkscope's, or transformers' eager one for a slow-path family."""
    record = declared(config)
    return "eager" if record is not None and record.slow else attention.ATTENTION_NAME


def with_sinkscope_attention(build: Callable[[], T], name: str) -> T:
    """``build()``: a model made with the attention ``implementation_for`` picks (``from_pretrained`` or
    ``from_config``). A family that picks its attention class from a table of its own (GIT) fails on Sinkscope's
    name with a KeyError: refused so."""
    try:
        return build()
    except KeyError as err:
        if err.args != (attention.ATTENTION_NAME,):
            raise
        raise ModelLoadError("error.own_attention_table", family=name) from err


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


@contextmanager
def _loading_quietly() -> Iterator[None]:
    """Within: transformers prints neither its load report (``check_weights`` says what matters) nor a progress bar."""
    report_log, bars = logging.getLogger("transformers.modeling_utils"), hf_logging.is_progress_bar_enabled()
    report_log.addFilter(_errors_only)  # a filter, not a level: transformers reads that logger's level
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        report_log.removeFilter(_errors_only)
        if bars:
            hf_logging.enable_progress_bar()


def check_weights(model: Any, report: dict[str, list], spec: str) -> None:
    """Refuse weights that would measure nothing real: of another shape, missing (left random), NaN or infinite."""
    if report["mismatched_keys"]:
        mismatched = sorted(report["mismatched_keys"])
        weight, found, expected = mismatched[0]
        shapes = {"found": " × ".join(map(str, found)), "expected": " × ".join(map(str, expected))}
        raise ModelLoadError("error.weights_shape", spec=spec, n=len(mismatched), weight=weight, **shapes)
    if report["missing_keys"]:
        missing = sorted(report["missing_keys"])
        raise ModelLoadError("error.weights_missing", spec=spec, n=len(missing), weight=missing[0])
    if report["unexpected_keys"]:
        log.info("%d tensors in %s's files are not used by the model", len(report["unexpected_keys"]), spec)
    damaged = next((name for name, p in model.named_parameters() if not torch.isfinite(p).all()), None)
    if damaged is not None:
        raise ModelLoadError("error.weights_not_finite", spec=spec, name=damaged)


def check_capture(model: Any) -> None:
    """Refuse, at load, a model whose attention does not reach Sinkscope in every layer: a three-token forward
    must call ``sinkscope.core.attention`` once per layer, with no argument it would have to ignore."""
    n_layers = model.config.get_text_config().num_hidden_layers
    if getattr(declared(model.config), "slow", False):
        check_slow(model)
        return
    try:
        family = find_family(model)
        recorder = attention.Recorder(family=family)
        with torch.inference_mode(), attention.recording(recorder):
            model(input_ids=torch.zeros(1, 3, dtype=torch.long, device=model.device), use_cache=False)
    except ModelLoadError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError, IndexError) as err:  # its own code failed
        family_type = model.config.get_text_config().model_type
        found = {"family": family_type, "reason": reason_of(err), "supported": supported_names()}
        raise ModelLoadError("error.not_interface", **found) from err
    require_every_layer(recorder, [layer for layer in range(n_layers) if family.attends(layer)], family.name)
    if not family.tested:
        log.warning("%s is not in Sinkscope's tested family matrix; its attention passed the load check", family.name)


def check_slow(model: Any) -> None:
    """A slow-path family must return every layer's weights from its eager forward."""
    with torch.inference_mode():
        ids = PROBE_IDS.to(model.device) % model.get_input_embeddings().num_embeddings
        output = model(input_ids=ids, output_attentions=True, use_cache=False)
    given = [layer for layer, maps in enumerate(output.attentions or ()) if maps is not None]
    if len(given) != model.config.get_text_config().num_hidden_layers:
        raise ModelLoadError("error.slow_no_weights", family=family_of(model.config).name)


def require_every_layer(recorder: attention.Recorder, layers: list[int], family: str) -> None:
    """A forward whose attention skipped Sinkscope in one of its attention ``layers`` measured nothing there:
    refuse it."""
    missing = [layer for layer in layers if layer not in recorder.sums["sink"]]
    if missing:
        raise ModelLoadError("error.not_captured", layers=missing, family=family, supported=supported_names())
