"""The residual hooks a model carries from its load (``LoadedModel``): each forward's h^0 .. h^L edited by the calling
thread's intervention (if any) and copied into its recorder (if any); with them, the hooks on each block's writes
(``core.writes``).

Installed once per model and kept: hooks added per call to a model shared by Streamlit's threads would also
capture the forward pass another session runs at the same time.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import torch

from sinkscope.core import attention, writes
from sinkscope.core.errors import ModelLoadError
from sinkscope.core.families import Family


def decoder_layers(model: Any, family: Family) -> torch.nn.ModuleList:
    """The list of decoder blocks, where the model's family keeps it (layers, h, decoder.layers, ...)."""
    n_layers = model.config.get_text_config().num_hidden_layers
    blocks = family.decoder_blocks(model)
    if not isinstance(blocks, torch.nn.ModuleList) or len(blocks) != n_layers:
        raise ModelLoadError("error.no_layers", n=n_layers, model=family.name)
    return blocks


def _edit_and_keep(index: int, hidden: torch.Tensor) -> torch.Tensor:
    """h^index after this thread's change (if any), copied into its recorder (if it keeps the stream)."""
    change, recorder = attention.current_change(), attention.current_recorder()
    if change is not None and change.edit_residual is not None:
        hidden = change.edit_residual(index, hidden)
    if recorder is not None and recorder.residual is not None:  # copied as it is made: the stream is held once
        recorder.residual[index] = hidden[0].float().cpu().numpy()  # hidden: (1, token, d_model)
    return hidden


def _take_input(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    hidden = _edit_and_keep(0, args[0] if args else kwargs["hidden_states"])
    recorder = attention.current_recorder()
    if recorder is not None and recorder.block_call is not None:  # what the model passes its blocks, then stop
        recorder.block_call.update(args=args[1:], kwargs=kwargs)
        raise attention.StopForward
    return ((hidden, *args[1:]), kwargs) if args else (args, kwargs | {"hidden_states": hidden})


def _take_output(index: int, _module: Any, _args: tuple, output: Any) -> Any:
    hidden = _edit_and_keep(index, output[0] if isinstance(output, tuple) else output)
    recorder = attention.current_recorder()
    if recorder is not None and recorder.writes is not None:
        recorder.writes.close(index - 1, hidden[0])  # block index - 1 wrote h^index: (token, d_model)
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


def _take_write(block: int, part: str, _module: Any, _args: tuple, output: Any) -> Any:
    made = output[0] if isinstance(output, tuple) else output
    write = made if made.dim() == 3 else made.view(1, -1, made.shape[-1])  # (row, token, d_model); OPT's MLP: one row
    change, recorder = attention.current_change(), attention.current_recorder()
    edit = getattr(change, "edit_write", None) if change is not None else None
    if edit is not None:
        write = edit(block, part, write)
    if recorder is not None and recorder.writes is not None:
        recorder.writes.keep(block, part, write)
    write = write.view(made.shape)
    return (write, *output[1:]) if isinstance(output, tuple) else write


def install_write_hooks(blocks: torch.nn.ModuleList, family: Family) -> bool:
    """Hooks on every block's two writes; False (and none installed) when some block lacks them."""
    found = [writes.write_modules(block, family) for block in blocks]
    if any(modules is None for modules in found):
        return False
    for index, modules in enumerate(found):
        for part, module in modules.items():
            module.register_forward_hook(partial(_take_write, index, part))
    return True


_install_lock = threading.Lock()


def install_residual_hooks(model: Any, family: Family) -> None:
    """Hooks that apply the calling thread's residual edit (if any) to h^0 and each block's output and
    copy them into its recorder (if any); once per model."""
    with _install_lock:
        if getattr(model, "_sinkscope_residual_hooks", False):
            return
        layers = decoder_layers(model, family)
        layers[0].register_forward_pre_hook(_take_input, with_kwargs=True)
        for index, layer in enumerate(layers, start=1):
            layer.register_forward_hook(partial(_take_output, index))
        model._sinkscope_writes = install_write_hooks(layers, family)
        model._sinkscope_residual_hooks = True
