"""WebDataset reader for training and evaluation: plan, rank/worker split, bucketing, mixing,
resumable state, and the collator. See docs/design.md ("Data loading")."""

from speechlm.data.collate import Clips, Collator
from speechlm.data.loader import EvalLoader, TrainLoader

__all__ = ["Clips", "Collator", "EvalLoader", "TrainLoader"]
