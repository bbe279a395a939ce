"""Weave's gate inside the RL libraries teams already use. Each integration imports its
library inside its functions (the client stays standard-library only at module level):
``trl`` (TRL's ``GRPOTrainer``, the ``trl`` extra)."""
