"""The assistant reply as a grammar compiled from the tools' JSON schemas: which tokens may come next.

    reply  := (call | speech) stop
    call   := "<tool_call>" {"name": <one tool's name>, "arguments": <that tool's parameters>} "</tool_call>"
    speech := text that does not start with "<" and never holds "<tool_call>" (free: only calls are constrained);
              spoken (the agent's replies, read aloud and shown as the call's transcript): no comma directly before
              a letter either

llguidance compiles the grammar (Lark, with the calls' JSON schema inlined) into a mask over the tokenizer's
byte-level tokens, so a token may end inside a JSON string or inside a UTF-8 character and the mask stays exact:
a string never closes on half a character. One mechanism serves every tool; a schema is only closed before it is
compiled (`closed_schema`): an object takes no property it does not list, a string the schema leaves open is 1 to
`TEXT_MAX_CHARS` characters, and strings hold no control character (only the \\" and \\\\ escapes).

The JSON is compact, except that one space may follow ":" and ",": Parley's own calls are compact
(app.agent.protocol.format_tool_call) while the prompts of the other chat styles show `{"name": ..., "arguments": ...}`
with spaces, and both parse. No other whitespace: a model that may write whitespace can loop on it inside a call.
"""
import copy
import json
import re
from functools import lru_cache

import llguidance
import numpy as np
import torch

from app.agent.protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

TEXT_MAX_CHARS = 40  # characters of a string whose schema gives no bound (a name, a service, a time)
# A string the schema leaves open: never empty (app.agent.tools.Toolbox reads "" as a missing argument), always bounded.
_FREE_TEXT = {"minLength": 1, "maxLength": TEXT_MAX_CHARS}
_JSON_FORMAT = {"whitespace_flexible": False, "key_separator": ": ?", "item_separator": ", ?",
                "json_allowed_escapes": '"\\'}
# JSON Schema keywords whose values are schemas: one, a list of them, or a map of names to them.
_SUBSCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def closed_schema(schema):
    """A copy of a JSON schema with every object closed (additionalProperties false unless it says otherwise) and
    every string that is no enum, const, pattern or format bounded to 1..TEXT_MAX_CHARS characters (unless it says)."""
    if not isinstance(schema, dict):
        return schema  # a boolean schema
    out = dict(schema)
    for key in _SUBSCHEMA:
        if key in out:
            out[key] = closed_schema(out[key])
    for key in _SUBSCHEMA_LISTS:
        if key in out:
            out[key] = [closed_schema(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if key in out:
            out[key] = {name: closed_schema(s) for name, s in out[key].items()}
    types = out.get("type") if isinstance(out.get("type"), list) else [out.get("type")]
    if "object" in types or "properties" in out:
        out.setdefault("additionalProperties", False)
    if "string" in types and not {"enum", "const", "pattern", "format"} & out.keys():
        for key, value in _FREE_TEXT.items():
            out.setdefault(key, value)
    return out


def reply_lark(schemas: list[dict], call_required: bool = False, spoken: bool = False) -> str:
    """The reply grammar in llguidance's Lark syntax, for tools given as {"name", "parameters"} schemas;
    call_required: the reply is a call (an API's tool_choice "required"); spoken: the speech is prose, whose comma
    a space follows before any word (a name the caller gave in lower case, "ski", was copied token for token:
    "You're all set,ski.")."""
    speech = f"SPEECH: /[^<](?s:.)*/ & ~/(?s:.*){re.escape(TOOL_CALL_OPEN)}(?s:.*)/"
    if spoken:
        speech += r" & ~/(?s:.*),\p{L}(?s:.*)/"
    if not schemas:
        return f"start: SPEECH\n{speech}\n"
    calls = {"anyOf": [{"type": "object", "properties": {"name": {"const": s["name"]},
                                                         "arguments": closed_schema(s["parameters"])},
                        "required": ["name", "arguments"], "additionalProperties": False} for s in schemas],
             "x-guidance": _JSON_FORMAT}
    return (f"start: call{'' if call_required else ' | SPEECH'}\n"
            f"call: {json.dumps(TOOL_CALL_OPEN)} %json {json.dumps(calls)} {json.dumps(TOOL_CALL_CLOSE)}\n"
            f"{speech}\n")


class ReplyGrammar:
    """The reply grammar compiled once for a tokenizer and a set of tools; `start` gives each reply its matcher.

    The tokenizer's index is made once (~0.4 s for SmolLM2's 49k tokens), a grammar on it in ~5 ms; `start` only
    copies the compiled matcher (~20 us). One grammar may serve every session and thread.
    """

    def __init__(self, tokenizer, schemas: list[dict], stop_ids: tuple[int, ...], vocab_size: int,
                 call_required: bool = False, spoken: bool = False):
        if vocab_size < tokenizer.get_vocab_size():
            raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer's {tokenizer.get_vocab_size()}")
        if not stop_ids or not all(0 <= i < vocab_size for i in stop_ids):
            raise ValueError(f"stop_ids must be ids below vocab_size {vocab_size}, got {stop_ids!r}")
        self.vocab_size, self.stop_ids = vocab_size, tuple(stop_ids)
        ll_tokenizer = _ll_tokenizer(tokenizer, vocab_size, self.stop_ids)
        self._matcher = llguidance.LLMatcher(ll_tokenizer, reply_lark(schemas, call_required, spoken),
                                           log_level=0)
        if self._matcher.is_error():
            raise ValueError(f"the tools' schemas do not compile to a grammar: {self._matcher.get_error()}")

    def start(self) -> "ReplyMatcher":
        """A fresh matcher for one reply."""
        return ReplyMatcher(self._matcher.deep_copy(), self.vocab_size, self.stop_ids)


@lru_cache(maxsize=4)
def _ll_tokenizer(tokenizer, vocab_size: int, stop_ids: tuple[int, ...]) -> llguidance.LLTokenizer:
    """llguidance's index of the tokenizer's bytes, made once (~0.4 s for SmolLM2's 49k tokens; a grammar on it
    then compiles in ~5 ms)."""
    plain = copy.copy(tokenizer)  # serialized without padding or truncation, which would reach llguidance
    plain.no_padding()
    plain.no_truncation()
    # Ids past the tokenizer's (the model's extra rows) have no bytes, so no mask ever allows them.
    return llguidance.LLTokenizer(plain.to_str(), n_vocab=vocab_size, eos_token=list(stop_ids))


def grammar_for(tokenizer, schemas: list[dict], stop_ids: tuple[int, ...], vocab_size: int,
                call_required: bool = False, spoken: bool = False) -> ReplyGrammar:
    """The reply grammar of `schemas` for `tokenizer`, compiled once per combination (an agent is made per session)."""
    # the key order is the grammar's
    return _grammar_for(tokenizer, json.dumps(schemas), tuple(stop_ids), vocab_size, call_required, spoken)


@lru_cache(maxsize=64)
def _grammar_for(tokenizer, schemas_json: str, stop_ids: tuple[int, ...], vocab_size: int,
                 call_required: bool, spoken: bool) -> ReplyGrammar:
    return ReplyGrammar(tokenizer, json.loads(schemas_json), stop_ids, vocab_size, call_required, spoken)


class ReplyMatcher:
    """Where one reply stands in the grammar: the tokens allowed next, advanced and rolled back token by token.

    Not thread-safe: one reply, one thread at a time. A stop id is never fed to llguidance (it is allowed exactly
    where the grammar accepts the reply so far); `done` and `rollback` account for it here.
    """

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int, stop_ids: tuple[int, ...]):
        self._matcher, self._vocab_size, self._stop_ids = matcher, vocab_size, stop_ids
        # (ceil(V/32),) int32: token i is bit i % 32 of word i // 32
        self._bits = np.zeros((vocab_size + 31) // 32, dtype=np.int32)
        self._consumed = 0  # tokens fed to the llguidance matcher
        self._stopped = False  # a stop id was accepted after them
        self._allowed: torch.Tensor | None = None  # allowed() of this state, until accept or rollback moves it

    def allowed(self) -> torch.Tensor:
        """(vocab_size,) bool: the tokens `accept` takes next. The same tensor until the state moves: read it,
        never write it (a decoder asks twice a token: whether the grammar forces one, then to mask the logits)."""
        if self._allowed is None:
            self._allowed = self._mask()
        return self._allowed

    def _mask(self) -> torch.Tensor:
        if self._stopped:
            return torch.zeros(self._vocab_size, dtype=torch.bool)
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        allowed = np.unpackbits(self._bits.view(np.uint8), count=self._vocab_size, bitorder="little").view(np.bool_)
        allowed[list(self._stop_ids)] = self._matcher.is_accepting()
        return torch.from_numpy(allowed)

    def accept(self, token: int) -> bool:
        """Advance by one token; False, and no change, if the grammar does not allow it here."""
        token = int(token)
        if self._stopped or not 0 <= token < self._vocab_size:
            return False
        if token in self._stop_ids:
            self._stopped = self._matcher.is_accepting()
            self._allowed = None if self._stopped else self._allowed
            return self._stopped
        if self._matcher.validate_tokens([token]) != 1:  # checked first: a refused token would poison the matcher
            return False
        consumed = self._matcher.consume_token(token)
        assert consumed, self._matcher.get_error()
        self._consumed += 1
        self._allowed = None
        return True

    def rollback(self, n: int) -> None:
        """Undo the last n accepted tokens."""
        assert 0 <= n <= self._consumed + self._stopped, f"cannot roll back {n} tokens"
        self._allowed = None if n else self._allowed
        if n and self._stopped:
            self._stopped, n = False, n - 1
        if n:
            rolled_back = self._matcher.rollback(n)
            assert rolled_back, self._matcher.get_error()
            self._consumed -= n

    def done(self) -> bool:
        """A stop id was accepted: the reply is complete."""
        return self._stopped
