"""The guided course: steps through the pages, each a question answered before its result is revealed."""

from sinkscope.course.steps import STEPS, Reveal, Step, answers_param, parse_answers, step_index

__all__ = ["STEPS", "Reveal", "Step", "answers_param", "parse_answers", "step_index"]
