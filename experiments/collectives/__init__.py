"""NCCL collectives: the prior and residual model on Vidur's network tables."""
