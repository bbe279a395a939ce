"""Weave's runtime for real RL jobs (PyTorch): state kept warm in host memory between phases,
weights synced to rollout workers with a digest check, and a reference GRPO job.

Install with ``pip install "./python[torch]"``; ``weave_client`` itself stays standard-library
only and never imports this package. Importing the package loads nothing heavy: a module that
needs no PyTorch (the sandbox host, forked once per sandbox) starts small.
"""

__all__ = ["CheckpointError", "ResidentState", "Switch", "load_checkpoint", "save_checkpoint"]


def __getattr__(name: str):
    if name in __all__:
        from . import resident

        return getattr(resident, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
