"""How the agent decodes: the options a checkpoint may set (its generation_config.json) and their defaults."""
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from llm.generate import DecodeOptions


@dataclass(frozen=True)
class AgentOptions:
    max_new_tokens: int = DecodeOptions.max_new_tokens
    block_length: int = DecodeOptions.block_length
    threshold: float = DecodeOptions.threshold
    cache: str = DecodeOptions.cache  # the sampler's KV cache (llm.generate.CACHE_MODES), or "block" (the brain)
    max_tool_rounds: int = 3        # tool calls in one turn before the agent stops asking
    max_history_turns: int = 8      # user turns kept in the prompt; 0: as many as fit (Agent.prompt)
    max_prompt_tokens: int = 0      # a prompt's budget, system prompt included (0: the model's context less a reply)
    draft_length: int = 0           # cache "block": tokens a pass guessed by prompt lookup and verified (exact)
    # with cache "block" and an engine that has a tokenizer: replies decoded under the tools' schemas
    # (app.agent.schema_grammar), their calls held to the details said (app.agent.held.held)
    tool_grammar: bool = True

    @property
    def holds_calls(self) -> bool:
        """Replies are decoded under the tools' schemas: asked for, and decoded with the block cache."""
        return self.tool_grammar and self.cache == "block"


DECODE_FIELDS = ("max_new_tokens", "block_length", "threshold", "cache", "max_history_turns", "max_prompt_tokens",
                 "draft_length")


def agent_options_for(model_dir) -> AgentOptions:
    """AgentOptions with the checkpoint's own decoding preferences (generation_config.json: DECODE_FIELDS)
    applied; a checkpoint without them gets the defaults."""
    if Path(model_dir).suffix == ".gguf":  # a left-to-right base read from one file: its greedy decoding, held to
        # the tools' schemas (llm.blockdiff with one token a pass), and as much of the call as fits
        return dataclasses.replace(AgentOptions(), cache="block", block_length=1, threshold=1.0, max_history_turns=0,
                                   draft_length=8)
    path = Path(model_dir) / "generation_config.json"
    try:
        prefs = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    return dataclasses.replace(AgentOptions(), **{k: prefs[k] for k in DECODE_FIELDS if k in prefs})
