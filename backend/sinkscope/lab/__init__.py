"""The training lab: softmax polarizes (``polarization``) and tiny transformers learn tasks (``toy``, ``tasks``)."""

from sinkscope.lab.polarization import PolarizeRun, entropy_of, normalize, polarize

__all__ = ["PolarizeRun", "entropy_of", "normalize", "polarize"]
