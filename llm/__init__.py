"""Parley's diffusion language model: the transformer, checkpoint loading, the sampler and chat formats."""
from llm.engine import Engine, Generation
from llm.load import load, save_parley

__all__ = ["Engine", "Generation", "load", "save_parley"]
