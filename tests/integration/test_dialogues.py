"""The training-data generator: deterministic, grounded in real tool results, held-out split disjoint."""
import json
import random
import re
from datetime import datetime

import pytest

from app.training.dialogues.phrases import NOT_NAMES
from app.agent.days import parse_time
from app.agent.profile import load_profile
from app.agent.protocol import TOOL_CALL_OPEN, parse_tool_calls
from app.training.dialogues import cases, generate, phrases, templates, variants
from app.training.dialogues.replies import facts
from app.training.dialogues.script import Script


@pytest.fixture(scope="module")
def profile():
    return load_profile(None)


@pytest.fixture(scope="module")
def train(profile):
    return generate(profile, "train", 400, seed=1)


@pytest.fixture(scope="module")
def heldout(profile):
    return generate(profile, "heldout", 150, seed=1)


def test_same_seed_same_dialogues(profile, train):
    again = generate(profile, "train", 400, seed=1)
    assert [d.messages for d in again] == [d.messages for d in train]
    assert [d.messages for d in generate(profile, "train", 20, seed=2)] != [d.messages for d in train[:20]]


def _user_texts(dialogues):
    return {m["content"] for d in dialogues for m in d.messages if m["role"] == "user"}


def _calls(messages) -> list[tuple[str, dict]]:
    """The (name, arguments) of every tool call among `messages`, in order."""
    return [call for m in messages if m["role"] == "assistant" for call in parse_tool_calls(m["content"])[0]]


def _call_args(dialogues, key):
    return {args[key].split()[0] for d in dialogues for _, args in _calls(d.messages) if key in args}


def test_heldout_phrasings_and_names_are_unseen_in_training(train, heldout):
    heldout_texts = _user_texts(heldout) - {"Goodbye.", "Bye."}
    overlap = heldout_texts & _user_texts(train)
    # only bare one-word answers ("Tomorrow.") may coincide
    assert all(len(t.split()) <= 2 for t in overlap), sorted(overlap)[:10]
    heldout_names, train_names = _call_args(heldout, "name"), _call_args(train, "name")
    assert heldout_names and not heldout_names & train_names
    assert set(phrases.split_items(phrases.FIRST_NAMES, "heldout")).isdisjoint(
        phrases.split_items(phrases.FIRST_NAMES, "train"))


def test_training_variants_widen_the_train_split_only(profile):
    """With variants, training draws from hundreds of extra phrasings (app.training.dialogues.variants); none is within one
    word of a held-out phrasing, none says "thanks", and the held-out split is the same dialogues either way."""
    everything = [v for patterns in variants.PATTERNS.values() for p in patterns for v in variants.expand(p)]
    kept = [v for name in variants.PATTERNS for v in variants.more(variants.template_list(name))]
    assert len(kept) > 800
    held = [variants._words(x) for x in variants.heldout_items()]
    assert "Could you set up an appointment for me" in variants.heldout_items()
    assert any(variants.near_heldout(v, held) for v in everything)  # the filter had something to drop
    assert not any(variants.near_heldout(v, held) for v in kept)
    assert not any("thanks" in v.lower() for v in kept)

    def said(dialogues):
        return [m["content"] for d in dialogues for m in d.messages if m["role"] == "user"]

    def phone_variants(dialogues):
        return sum(any(v.lower() in text.lower() for v in variants.more(templates.PHONE)) for text in said(dialogues))

    assert phone_variants(generate(profile, "train", 400, seed=1, variants=True)) >= 3
    assert phone_variants(generate(profile, "train", 400, seed=1)) == 0
    assert said(generate(profile, "heldout", 60, seed=3, variants=True)) == said(generate(profile, "heldout", 60, seed=3))


def test_made_up_names_with_variants_are_never_capitalized_words_that_are_no_names(profile):
    script = Script(profile, "train", random.Random(0), datetime(2026, 3, 2, 10, 0), variants=True)
    names = [script.made_up_name() for _ in range(20000)]
    assert len(set(names)) > 5000 and not set(names) & NOT_NAMES


def test_callers_add_courtesies_and_each_split_has_its_own(train, heldout):
    """Some requests and answers end with a courtesy ("Noah, thank you."); "thanks" is a held-out one."""
    def courtesies(dialogues):
        found = set()
        for d in dialogues:
            for m, intent in zip([m for m in d.messages if m["role"] == "user"], d.intents):
                if intent not in ("thanks", "goodbye", "greeting", "how_are_you"):
                    found |= {t for t in phrases.TAILS if m["content"].lower().endswith(f", {t}.")
                              or m["content"].endswith(f"? {t.capitalize()}.")}
        return found

    assert courtesies(train) == set(phrases.split_items(phrases.TAILS, "train"))
    assert courtesies(heldout) == set(phrases.split_items(phrases.TAILS, "heldout")) == {"thanks", "thanks so much"}


def test_every_tool_call_is_followed_by_its_real_result_and_a_grounded_reply(train):
    n_calls = 0
    for d in train:
        for i, m in enumerate(d.messages):
            if m["role"] == "assistant" and m["content"].startswith(TOOL_CALL_OPEN):
                tool = d.messages[i + 1]
                assert tool["role"] == "tool"
                result = json.loads(tool["content"])["result"]
                reply = d.messages[i + 2]["content"]
                assert all(f.lower() in reply.lower() for f in facts(json.loads(tool["content"])["name"], result))
                if not result["ok"]:
                    assert reply.startswith("I'm sorry")  # a refusal is explained, never confirmed
                n_calls += 1
    assert n_calls > 300


def test_refusals_of_every_kind_occur(train):
    errors = " ".join(json.loads(m["content"])["result"].get("error", "")
                      for d in train for m in d.messages if m["role"] == "tool")
    for reason in ("is already taken", "we're open", "closed on", "don't offer", "has already passed"):
        assert reason in errors


def test_times_in_calls_are_24_hour_and_match_what_was_said(train):
    for d in train:
        for _, args in _calls(d.messages):
            if "time" in args:
                assert re.fullmatch(r"\d\d:\d\d", args["time"])


def test_whisper_style_time_forms_normalize():
    forms = phrases.time_forms(15, 30, ampm_implied=True)
    for said in ("3:30 p.m.", "half past three", "three thirty", "3:30 in the afternoon"):
        assert said in forms
    assert "noon" in phrases.time_forms(12, 0, ampm_implied=True)
    assert "10am" in phrases.time_forms(10, 0, ampm_implied=True)
    assert parse_time("15:30").hour == 15


def test_cases_are_written_from_the_agent_messages(profile, heldout):
    held_cases = cases(heldout[:30])
    assert sum(len(d.intents) for d in heldout[:30]) == len(held_cases)
    booked = [c for c in held_cases if c.calls and c.calls[0][0] == "book_appointment"]
    assert booked and all(set(c.calls[0][1]) == {"name", "day", "time", "service"} for c in booked)


def reference_replies(dialogues, profile) -> dict[str, str]:
    """Each assistant message of the dialogues, keyed by the prompt the agent sends a test-double engine (the
    business's name as its system message, the last max_history_turns user turns) for it."""
    from app.agent.options import AgentOptions
    from app.agent.prompt import system_prompt

    system = {"role": "system", "content": system_prompt(profile, None, "parley")}
    out = {}
    for d in dialogues:
        for i, m in enumerate(d.messages):
            if m["role"] == "assistant":
                users = [j for j, x in enumerate(d.messages[:i]) if x["role"] == "user"]
                keep = AgentOptions.max_history_turns
                start = users[-keep] if len(users) > keep else 0
                out[json.dumps([system] + d.messages[start:i])] = m["content"]
    return out


def test_evaluation_scores_a_perfect_and_a_wrong_agent(profile):
    from app.training.evaluate import evaluate
    from tests.fakes import FakeEngine

    held = generate(profile, "heldout", 12, seed=5)
    reference = reference_replies(held, profile)
    perfect = evaluate(FakeEngine(lambda messages: reference[json.dumps(messages)]), profile, 12, seed=5).summary()
    assert perfect["tool_call_exact_match"] == 1.0 and perfect["grounded_replies"] == 1.0
    assert perfect["no_call_accuracy"] == 1.0 and perfect["tool_call_turns"] > 5
    never_calls = evaluate(FakeEngine(lambda messages: "Sure."), profile, 12, seed=5).summary()
    assert never_calls["tool_call_exact_match"] == 0.0 and never_calls["no_call_accuracy"] == 1.0


def _replay(d, profile):
    """`d` replayed through the real Agent and tools at `profile`'s business: the history it holds after."""
    from app.agent.loop import Agent
    from app.agent.options import AgentOptions
    from app.agent.store import open_store
    from app.agent.tools import Toolbox
    from tests.fakes import FakeEngine

    written = iter(m["content"] for m in d.messages if m["role"] == "assistant")
    store = open_store(":memory:")
    options = AgentOptions(cache="block", block_length=1, tool_grammar=False, max_history_turns=0)
    agent = Agent(FakeEngine(lambda m: next(written), block_words=1000), Toolbox(profile, store, now=lambda: d.now),
                  "system", options)
    for text, snapshot in zip((m["content"] for m in d.messages if m["role"] == "user"), d.snapshots):
        # the bookings other callers made before this message (a later request's setup comes mid-call)
        held = {(a.name, a.service, a.start, a.duration_min) for a in store.all()}
        for booking in snapshot:
            if booking not in held:
                store.add(*booking)
        agent.respond(text)
    return agent.messages


def test_the_adapt_recipes_dialogues_are_what_the_agent_writes_when_it_replays_them(profile):
    """Train as you run: replayed through the real Agent (the embedded brain's options, real tools and store),
    a model that writes the dialogue's assistant messages gets exactly the dialogue's history back, questions
    for missing details included: the call that lacked them as the agent holds it, and what it was told."""
    from app.training.recipe import DIALOGUES

    dialogues = generate(profile, "train", 60, seed=4, style=DIALOGUES)
    asked = 0
    for d in dialogues:
        assert _replay(d, profile) == d.messages
        asked += sum('"missing"' in m["content"] for m in d.messages if m["role"] == "tool")
    assert asked >= 20
    assert sum(sum(m["role"] == "user" for m in d.messages) >= 4 for d in dialogues) >= 10  # long calls too


def test_conversational_turns_go_on_from_the_last_one_in_training_only(profile):
    """With Style.conversational (the adapt recipe), a follow-up ("and a blow dry?") repeats the last call with
    one argument changed, a name said in part and then whole is booked whole, and compliments get their reply;
    the held-out split is the same dialogues either way."""
    from app.training.recipe import DIALOGUES
    from app.training.dialogues import Style
    assert DIALOGUES.conversational
    dialogues = generate(profile, "train", 600, seed=5, style=DIALOGUES)
    asks = [re.escape(f).replace(re.escape("{thing}"), ".+") for f in templates.FOLLOW_UP + variants.more(
        templates.FOLLOW_UP)]
    follow_up = re.compile("|".join(f"(?:{a})" for a in asks), re.IGNORECASE)
    follow_ups = twice = compliments = 0
    for d in dialogues:
        users = [i for i, m in enumerate(d.messages) if m["role"] == "user"]
        for k, i in enumerate(users[1:], 1):
            text = d.messages[i]["content"]
            before, now = _calls(d.messages[users[k - 1]:i]), _calls(d.messages[i:i + 3])
            if follow_up.search(text) and d.intents[k] in ("info", "availability") and before and now \
                    and now[0][0] == before[-1][0]:
                (_, args), (_, last) = now[0], before[-1]
                changed = {key for key in args if args[key] != last.get(key)}
                assert len(changed) == 1 and changed <= {"service", "day"}, (text, last, args)
                follow_ups += 1
            match = re.fullmatch(r"(?:.*\s)?([A-Z][a-z]+)\. ((?:[A-Z][a-z]+) (?:[A-Z][a-z]+))[.,].*", text)
            if match and match.group(1) in match.group(2).split() and now and "name" in now[0][1]:
                assert now[0][1]["name"] == match.group(2)
                twice += 1
        compliments += d.intents.count("compliment")
    assert follow_ups >= 10 and twice >= 3 and compliments >= 10
    plain = Style(variants=True, ask_by_call=True, more_requests=0.4)
    assert [d.messages for d in generate(profile, "heldout", 80, seed=3, style=DIALOGUES)] == \
        [d.messages for d in generate(profile, "heldout", 80, seed=3, style=plain)]


def test_turns_about_what_the_call_already_holds(profile):
    """With Style.call_turns (`parley adapt --call-turns`): that day's hours asked again ("how late does that go?")
    repeat the hours call; someone else's booking ("can you book my wife as well? same time, Leila") is made under
    the name they said, never the caller's, and asked for when not said (after the time, taken by the caller now, is
    refused); of two appointments just listed, the one
    the caller names is cancelled, not the one they keep; "what's tomorrow's date?" is answered with the date tool's
    `tomorrow`. They replay through the real agent, and the held-out split is the same with or without them."""
    from dataclasses import replace

    from app.training.recipe import DIALOGUES
    style = replace(DIALOGUES, call_turns=True)
    dialogues = generate(profile, "train", 800, seed=7, style=style)
    for d in dialogues[:100]:
        assert _replay(d, profile) == d.messages
    assert [d.messages for d in generate(profile, "train", 40, seed=7, style=DIALOGUES)] != \
        [d.messages for d in dialogues[:40]]
    assert [d.messages for d in generate(profile, "heldout", 80, seed=3, style=DIALOGUES)] == \
        [d.messages for d in generate(profile, "heldout", 80, seed=3, style=style)]
    seen = dict.fromkeys(("hours_again", "second_person", "second_asked", "cancel_one", "tomorrow"), 0)
    hours_again = {t.lower() for t in templates.HOURS_FOLLOW_UP}
    asks = [re.sub(r"\\{\w+\\}", ".+", re.escape(t[:-1])) for t in
            templates.SECOND_SAME + templates.SECOND_TIME + templates.SECOND_NO_NAME]
    second = re.compile("|".join(f"(?:{a})" for a in asks), re.IGNORECASE)
    for d in dialogues:
        users = [i for i, m in enumerate(d.messages) if m["role"] == "user"]
        booked = []
        for k, i in enumerate(users):
            end = users[k + 1] if k + 1 < len(users) else len(d.messages)
            text, turn = d.messages[i]["content"], d.messages[i:end]
            now, before = _calls(turn), _calls(d.messages[:i])
            if any(text.lower().endswith(h) for h in hours_again):
                assert now == [before[-1]] and before[-1][1]["topic"] == "hours", text
                seen["hours_again"] += 1
            if second.search(text) and booked and d.intents[k] == "book":
                if now and "name" in now[0][1]:
                    assert now[0][1]["name"] not in booked and now[0][1]["name"].split()[0] in text, text
                    seen["second_person"] += 1
                elif now:   # asked their name; or first told the time is the caller's own now, and offered others
                    assert turn[-1]["content"] == "What name should I put it under?" or (
                        " is already taken" in turn[-1]["content"]), turn[-1]["content"]
                    seen["second_asked"] += 1
            match = re.search(r"(?:cancel|drop) (?:the )?(?:one on )?(\w+)\b.*\bkeep (\w+)|keep (\w+)\b.*"
                              r"\b(?:cancel|drop) (?:the )?(\w+)", text, re.IGNORECASE)
            if match and d.intents[k] == "cancel":
                drop = (match.group(1) or match.group(4)).lower()
                assert now == [("cancel_appointment", {"name": before[-1][1]["name"], "day": drop})], text
                seen["cancel_one"] += 1
            if now and now[0][0] == "current_datetime" and "tomorrow" in text.lower():
                result = json.loads(turn[2]["content"])["result"]
                assert now[0][1] == {"day": "tomorrow"} and "time" not in result, text
                assert turn[-1]["content"] == f"It's {result['date']}."
                seen["tomorrow"] += 1
            booked += [args["name"] for name, args in now if name == "book_appointment" and "name" in args]
    assert all(n >= 5 for n in seen.values()), seen


def test_other_businesses_are_made_up_per_dialogue_for_training_only(profile):
    """With Style.other_businesses, a share of the training dialogues is written for a made-up business: its own
    services in the calls, its own facts in the tools' results, its own name in the system prompt; the dialogues
    replay through the real agent at that business. The held-out split stays the salon's."""
    from dataclasses import replace

    from app.agent.prompt import compact_prompt
    from app.agent.schemas import SCHEMAS
    from app.training.recipe import DIALOGUES
    from app.training.dialogues import token_examples
    from app.training.dialogues.businesses import made_up_profile
    from llm import chat

    style = replace(DIALOGUES, other_businesses=0.5)
    dialogues = generate(profile, "train", 120, seed=6, style=style)
    others = [d for d in dialogues if d.profile.name != profile.name]
    assert 35 <= len(others) <= 85 and len({d.profile.name for d in others}) >= 20
    booked = 0
    for d in others:
        for name, args in _calls(d.messages):
            if name == "book_appointment" and "service" in args and d.profile.service(args["service"]):
                assert profile.service(args["service"]) is None or args["service"] in ("beard trim", "kids haircut")
                booked += 1
    assert booked >= 10
    for d in others[:15]:
        assert _replay(d, d.profile) == d.messages
    system = lambda p: compact_prompt(p, SCHEMAS)  # noqa: E731
    examples = token_examples(others[:3], system, lambda text: list(text.encode()), "smollm",
                              chat.END_OF_TURN["smollm"])
    for d, example in zip(others[:3], examples):
        assert compact_prompt(d.profile, SCHEMAS).encode() in bytes(example.ids)
        # the caller's words, end of turn included: what the teacher keeps as the base reads them (llm.adapt)
        users = [m["content"] + "<|im_end|>" for m in d.messages if m["role"] == "user"]
        assert [bytes(example.ids[s:e]).decode() for s, e in example.user_spans] == users
    assert made_up_profile(random.Random(1))[0] == made_up_profile(random.Random(1))[0]
    assert [d.messages for d in generate(profile, "heldout", 40, seed=3, style=style)] == \
        [d.messages for d in generate(profile, "heldout", 40, seed=3, style=DIALOGUES)]


def test_a_price_question_is_now_and_then_followed_by_booking_it(profile):
    """Conversational turns: after "how much is a blow dry?", "can I book it Friday at 2?" books the service asked
    about, named or not (against the pull to repeat the last call)."""
    from app.training.recipe import DIALOGUES
    dialogues = generate(profile, "train", 2000, seed=5, style=DIALOGUES)   # ~1 in 150 dialogues
    names = [name for service in profile.services for name in [service.name, *service.aliases]]
    unnamed = 0
    for d in dialogues:
        users = [i for i, m in enumerate(d.messages) if m["role"] == "user"]
        for k, i in enumerate(users[1:], 1):
            before = _calls(d.messages[users[k - 1]:i])
            if not (before and before[-1][0] == "business_info" and "service" in before[-1][1]
                    and profile.service(before[-1][1]["service"])):
                continue
            end = next((j for j in range(i, len(d.messages)) if d.messages[j]["role"] == "assistant"
                        and _calls([d.messages[j]])), None)
            if end is None or _calls([d.messages[end]])[0][0] != "book_appointment":
                continue
            said = " ".join(m["content"].lower() for m in d.messages[i:end] if m["role"] == "user")
            call = _calls([d.messages[end]])[0][1]
            if any(name in said for name in names) or "service" not in call:
                continue   # a booking that names its service (maybe another scenario's), or leaves it to be asked
            assert call["service"] == profile.service(before[-1][1]["service"]).name, said
            unnamed += 1
    assert unnamed >= 5
