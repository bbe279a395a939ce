"""Weave's runtime for real RL jobs (PyTorch): state kept warm in host memory between phases,
weights synced to rollout workers with a digest check, and a reference GRPO job.

Install with ``pip install "./python[torch]"``; ``weave_client`` itself stays standard-library
only and never imports this package.
"""

from .resident import CheckpointError, ResidentState, Switch, load_checkpoint, save_checkpoint

__all__ = ["CheckpointError", "ResidentState", "Switch", "load_checkpoint", "save_checkpoint"]
