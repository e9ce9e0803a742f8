"""Parley's diffusion language model: the transformer, checkpoint loading, the sampler and chat formats."""
