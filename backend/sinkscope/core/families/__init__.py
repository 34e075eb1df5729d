"""One adapter per decoder family, and the registry that finds a model's.

Adding a family is one file here (a ``Family`` record, or a subclass where a lookup differs) and one row of
the family matrix in tests/test_families.py. A model type outside the registry has its structure found at load
(``sinkscope.core.probe``: one probe forward read by ``found.find``), never guessed; ``sinkscope.core.models``
then checks that every layer's attention reaches Sinkscope.
"""

from __future__ import annotations

from typing import Any

from sinkscope.core.errors import ModelLoadError
from sinkscope.core.families import gemma, gpt2, gpt_neox, gpt_oss, gptj, llama, olmo2, opt, phi, slow, smollm3
from sinkscope.core.families.base import Family, Refused
from sinkscope.core.families.refused import REFUSED
from sinkscope.core.i18n import Message

FAMILIES: tuple[Family, ...] = (
    *llama.FAMILIES, *gemma.FAMILIES, *gpt2.FAMILIES, *gpt_neox.FAMILIES, *olmo2.FAMILIES, *gpt_oss.FAMILIES,
    *smollm3.FAMILIES, *opt.FAMILIES, *phi.FAMILIES, *gptj.FAMILIES, *slow.FAMILIES,
)  # fmt: skip
_BY_TYPE: dict[str, Family] = {model_type: family for family in FAMILIES for model_type in family.model_types}
_REFUSED: dict[str, Refused] = {model_type: refused for refused in REFUSED for model_type in refused.model_types}
_FOUND: dict[str, Family] = {}  # a model's own type -> the structure found at its first load (the type's code)

__all__ = [
    "FAMILIES", "REFUSED", "Family", "Refused", "check_supported", "declared", "family_of", "known", "name_of",
    "register_found", "supported_names",
]  # fmt: skip


def _model_type(config: Any) -> str:
    return config.get_text_config().model_type


def supported_names() -> str:
    """The measured families, for messages: "Llama, Mistral, ..."."""
    return ", ".join(family.name for family in FAMILIES)


def check_supported(config: Any) -> None:
    """Refuse a family Sinkscope cannot measure exactly, naming it and what is supported (a ModelLoadError)."""
    refused = _REFUSED.get(_model_type(config))
    if refused is not None:
        raise ModelLoadError(
            "error.family_refused", family=refused.name, reason=Message.of(refused.reason), supported=supported_names()
        )


def family_of(config: Any) -> Family:
    """The family of a model's config: its record, or the structure ``probe.find_family`` found at its load."""
    family = _BY_TYPE.get(_model_type(config)) or _FOUND.get(config.model_type)
    if family is None:
        raise ModelLoadError("error.family_not_found", model_type=config.model_type)
    return family


def name_of(config: Any) -> str:
    """A model's family as a message names it: its record's or its found name, else its model type (its structure
    may not be found yet: a refusal during the probe names it so)."""
    family = _BY_TYPE.get(_model_type(config)) or _FOUND.get(config.model_type)
    return family.name if family is not None else config.model_type


def declared(config: Any) -> Family | None:
    """The record of the model's family, if Sinkscope has one (before the model is built: a slow family loads with
    transformers' eager attention)."""
    return _BY_TYPE.get(_model_type(config))


def known(config: Any) -> bool:
    """Whether the model's type has a record or a structure found earlier."""
    return _model_type(config) in _BY_TYPE or config.model_type in _FOUND


def register_found(family: Family) -> None:
    """Keep a structure found at load (``sinkscope.core.probe``) for every later model of its types (the model's own
    type: Fuyu's text model is a Persimmon, but Fuyu's blocks lie elsewhere than a Persimmon's)."""
    _FOUND.update(dict.fromkeys(family.model_types, family))
