"""Probes: the model writes a call again up to one argument it left out, and the value it writes there is read
with the least share of its probability the reply grammar allowed over that value's tokens.

app.agent.meant.CallCheck decides which arguments to probe and which values to keep (PROBED_SHARE); this module
writes the probe and reads its value.
"""
import json
import logging
import re
import threading

from app.agent.protocol import TOOL_CALL_OPEN, compact, token_starts, tokens_over

log = logging.getLogger(__name__)

PROBE_TOKENS = 16       # the most tokens a probe writes for one value (a name of a few words, a service, a time)


def probe_prefix(name: str, arguments: dict, key: str, schema: dict) -> str:
    """The start of a call of tool `name` that goes on to argument `key`: its `arguments` that the schema lists
    before `key` (the grammar's order), then `"key`, for the model to write the rest (`probe`). The key's closing
    quote is the model's to write: it writes `":"` as one token, and a prompt cut after `":` reads to it as nothing
    it has seen."""
    order = list(schema["parameters"].get("properties", {}))
    before = {k: arguments[k] for k in order[:order.index(key)] if k in arguments}
    return TOOL_CALL_OPEN + compact({"name": name, "arguments": before})[:-2] + ("," if before else "") + \
        compact(key)[:-1]


def probed_value(text: str, start: int, offsets: list[int], shares: list[float]) -> tuple[str | None, float]:
    """The JSON string value a probe wrote after the key that ends at character `start` of `text` (its
    generation's; `offsets[i]` the character where token i starts, `shares[i]` its share of the model's
    probability the grammar allowed), and the least share over the tokens of the value, quotes included: (None,
    0.0) when the value did not close."""
    value = re.match(r'": ?("(?:[^"\\]|\\.)*")', text[start:])  # the grammar allows one space after ":"
    if value is None:
        return None, 0.0
    first, end = start + value.start(1), start + value.end(1)
    tokens = tokens_over(offsets, len(text), first, end)
    return json.loads(value.group(1)), min((shares[i] for i in tokens), default=0.0)


def probe(engine, options, matcher, messages: list[dict], prefix: str, least: float,
          spent: list | None = None) -> tuple[str | None, float]:
    """The value the model writes after `prefix` (`probe_prefix`) to `messages`, under `matcher` (the reply
    grammar's start), and its least share (`probed_value`); (None, 0.0) if it wrote none. The probe stops at a
    token written with less than `least` of the model's probability. spent gets the probe's generation."""
    tokenizer = engine.tokenizer
    ids = tokenizer.encode(prefix, add_special_tokens=False).ids
    if not all(matcher.accept(t) for t in ids):
        log.debug("a probe: the grammar does not take %r", prefix)
        return None, 0.0
    start = len(tokenizer.decode(ids, skip_special_tokens=True))
    closed, text = threading.Event(), []

    def on_block(piece: str) -> None:  # stop once the value's closing quote is written
        text.append(piece)
        if probed_value("".join(text), start, [], [])[0] is not None:
            closed.set()

    gen = engine.generate(messages, max_new_tokens=len(ids) + PROBE_TOKENS, block_length=1,
                          threshold=options.threshold, use_cache="block", on_block=on_block, cancel=closed,
                          matcher=matcher, draft_length=options.draft_length, written=ids,
                          least_share=least)  # an unmeant token ends it at once
    if spent is not None:
        spent.append(gen)
    log.debug("a probe after %r wrote %r in %.0f ms", prefix, gen.text[start:], 1000 * gen.seconds)
    if len(gen.shares) != len(gen.ids):
        return None, 0.0
    return probed_value(gen.text, start, token_starts(tokenizer, gen.ids), gen.shares)
