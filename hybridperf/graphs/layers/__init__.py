"""Layers the model families share: attention, norms, activations, RoPE, MoE, latent attention."""
