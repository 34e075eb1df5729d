"""The course's path: its steps, each with a question, its choices, and the page whose result it reveals.

Questions and choices are catalogue keys (``course.<step>.question``, ``course.<step>.<choice>``). What holds on
the learner's own model is computed in ``sinkscope.course.reveals`` from measured data. Progress lives in the
link: ``step`` (1-based) and ``answers``, the chosen ids joined by dots, empty where a step is unanswered.
"""

from __future__ import annotations

from dataclasses import dataclass

from sinkscope.core.i18n import Message


@dataclass(frozen=True)
class Step:
    id: str
    page: str  # URL path of the page that measures it in full
    choices: tuple[str, ...]  # choice ids

    def key(self, part: str) -> str:
        """The catalogue key of this step's ``part``: "title", "question" or one of its choices."""
        return f"course.{self.id}.{part}"

    def keys(self) -> tuple[str, ...]:
        return tuple(self.key(part) for part in ("title", "question", *self.choices))


@dataclass(frozen=True)
class Reveal:
    truth: str  # the choice that holds on this model and text
    said: tuple[Message, ...]  # one or two sentences computed from the numbers


STEPS = (
    Step("map", "explorer", ("first", "previous", "itself", "spread")),
    Step("budget", "softmax", ("nothing", "one", "less")),
    Step("reads", "reads-nothing", ("larger", "same", "smaller")),
    Step("massive", "massive", ("first", "last", "other")),
    Step("origins", "origins", ("attention", "mlp", "none")),
    Step("break", "break", ("barely", "some", "lot")),
    Step("streaming", "streaming", ("same", "little", "explodes")),
    Step("kv", "kv", ("most", "some", "none")),
    Step("kinds", "diagonals", ("sink", "diagonal", "same")),
    Step("cost", "diagonals", ("sink", "diagonal", "same", "depends")),
    Step("lab", "lab", ("yes", "no")),
    Step("claims", "claims", ("most", "half", "few")),
)
SEPARATOR = "."


def step_index(value: str | None) -> int | None:
    """The 0-based step of a link's 1-based ``step``, or None when it names no step."""
    try:
        index = int(value or "") - 1
    except ValueError:
        return None
    return index if 0 <= index < len(STEPS) else None


def parse_answers(value: str | None) -> tuple[tuple[str | None, ...], list[str]]:
    """(one answer or None per step, the link's parts that are no choice of their step or come after the last)."""
    answers: list[str | None] = [None] * len(STEPS)
    unknown = []
    for index, part in enumerate((value or "").split(SEPARATOR)):
        if index < len(STEPS) and part in STEPS[index].choices:
            answers[index] = part
        elif part:
            unknown.append(part)
    return tuple(answers), unknown


def answers_param(answers: tuple[str | None, ...]) -> str:
    """The link's ``answers``: the chosen ids joined by dots, trailing unanswered steps left out."""
    return SEPARATOR.join(answer or "" for answer in answers).rstrip(SEPARATOR)
