"""Tokenizers from a checkpoint directory: tokenizer.json, or byte-level BPE from vocab.json + merges.txt (Qwen2)."""
import functools
import json
import re
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

# Qwen2's pre-tokenizer split (Dream ships only vocab.json + merges.txt and a slow Qwen2 tokenizer class).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message names the file and what is wrong."""


def read_json(path: Path, required: bool = True) -> dict:
    """The parsed JSON file; {} when it is absent and optional."""
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path}: file not found")
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None


def token_string(value) -> str | None:
    """A special token as written in tokenizer_config.json: a string or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def byte_level_bpe(vocab_path: Path, merges_path: Path) -> Tokenizer:
    """The Qwen2 byte-level BPE: NFC, regex split, byte-level alphabet, no prefix space."""
    tokenizer = Tokenizer(models.BPE.from_file(str(vocab_path), str(merges_path)))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def add_declared_tokens(tokenizer: Tokenizer, tokenizer_config: dict, config_path: Path) -> None:
    """Add tokenizer_config.json's added_tokens_decoder entries at their declared ids."""
    declared = tokenizer_config.get("added_tokens_decoder", {})
    for token_id, spec in sorted(declared.items(), key=lambda item: int(item[0])):
        content = spec["content"]
        if tokenizer.token_to_id(content) is None:
            token = AddedToken(content, special=spec.get("special", True), normalized=spec.get("normalized", False),
                               lstrip=spec.get("lstrip", False), rstrip=spec.get("rstrip", False))
            if spec.get("special", True):
                tokenizer.add_special_tokens([token])
            else:
                tokenizer.add_tokens([token])
        if tokenizer.token_to_id(content) != int(token_id):
            raise CheckpointError(f"{config_path}: added token {content!r} declared as id {token_id} but the "
                                  f"vocabulary gives it id {tokenizer.token_to_id(content)}")


def load_tokenizer(path: Path) -> Tokenizer:
    """tokenizer.json when present, else vocab.json + merges.txt with tokenizer_config.json's added tokens."""
    if (path / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(path / "tokenizer.json"))
    vocab, merges = path / "vocab.json", path / "merges.txt"
    if not (vocab.is_file() and merges.is_file()):
        raise CheckpointError(f"{path}: no tokenizer: expected tokenizer.json, or vocab.json and merges.txt")
    tokenizer = byte_level_bpe(vocab, merges)
    config_path = path / "tokenizer_config.json"
    add_declared_tokens(tokenizer, read_json(config_path, required=False), config_path)
    return tokenizer


class TurnEncoder:
    """A chat prompt's ids, a turn at a time: the text is cut before each added token (`<|im_start|>`, ...), where
    the tokenizer cuts it anyway, and each piece's ids are remembered, so a turn's prompt encodes only its new
    messages. The same ids as encoding the whole text (tests/integration/test_gguf.py), for tokenizers whose added
    tokens strip nothing around them and with no normalizer; any other is encoded whole.
    NOTE: the salon's prompt encoded whole took ~0.6 ms a call, ~8 calls a development-set turn: 3.6 ms of it, 0.5 ms
    a turn at a time (2026-12-06)."""

    def __init__(self, tokenizer: Tokenizer, remembered: int = 256):
        self.tokenizer = tokenizer
        added = tokenizer.get_added_tokens_decoder().values()
        plain = tokenizer.normalizer is None and not any(t.lstrip or t.rstrip or t.single_word for t in added)
        contents = sorted({t.content for t in added}, key=len, reverse=True)
        self._cut = re.compile("(?=" + "|".join(map(re.escape, contents)) + ")") if plain and contents else None
        self._piece = functools.lru_cache(maxsize=remembered)(self._encode)

    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def __call__(self, text: str) -> list[int]:
        if self._cut is None:
            return list(self._encode(text))
        return [i for piece in self._cut.split(text) if piece for i in self._piece(piece)]
