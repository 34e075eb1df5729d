"""A claim's verdict on the user's model and text: reproduces, partly, differs or not measured."""

from __future__ import annotations

from dataclasses import dataclass

from sinkscope.core.i18n import Message


@dataclass(frozen=True)
class Verdict:
    claim: str  # one of claims.CLAIMS
    status: str  # one of STATUSES
    measured: Message | None  # what was measured here, ready to render in any language
    evidence: Message | None = None  # what the verdict rests on, and how much of it there is
    why: Message | None = None  # one sentence, when the verdict is partly or differs


def graded(claim: str, parts_holding: int, parts: int, measured: Message, evidence: Message, why: Message) -> Verdict:
    """All parts hold: reproduces; some: partly; none: differs (``why`` is kept only then)."""
    status = "reproduces" if parts_holding == parts else "partly" if parts_holding else "differs"
    return Verdict(claim, status, measured, evidence, None if status == "reproduces" else why)
