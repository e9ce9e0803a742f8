"""What the models read before a call: the language model's system message (the business and its tools, compact for
the embedded SmolLM2 brain, in full for LLaDA and Dream), and the speech recognizer's prompt (the business's words)."""
import json

from app.agent.days import DAYS, time_text
from app.agent.profile import Profile
from app.agent.schemas import SCHEMAS, UNLISTED
from app.agent.tools import Toolbox


_INSTRUCTIONS = """You are the voice assistant answering calls for {name}, {address}, phone {phone}.
Keep replies short and spoken: one or two sentences, no lists, no markdown.
Use the tools for anything about hours, availability, bookings, cancellations, prices, the date or time.
To call a tool, write only: <tool_call>{{"name": "TOOL", "arguments": {{...}}}}</tool_call>
Then wait for its result and answer from it; if the result says ok is false, explain the error, never confirm.
Arguments: day is one of {days}; time is HH:MM on a 24-hour clock ("half past three" -> "15:30", "noon" -> "12:00").
Before booking, ask for any missing detail: service, day, time, or the caller's name.
If the caller wants a person, call transfer_to_human; when they say goodbye, call end_call, then say goodbye.
For anything else, say politely that you can help with appointments, hours, services and prices.
Tools:
{tools}"""


_COMPACT = """You answer phone calls for {name}. Reply in one or two short spoken sentences.
For hours, address, phone, services, prices, free times, bookings, cancellations, the date or a person, first call a tool, alone in the reply: <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>
Then answer from its result. Give a tool only the details the caller said; if it says some are missing, ask for the first.
Tools:
{tools}
day: {days}. time: HH:MM, 24-hour.
Services: {services}."""


def _signature(schema: dict) -> str:
    """business_info(topic: hours|address, day?, service?): a tool in one line."""
    params = schema["parameters"]
    required = set(params.get("required", ()))
    args = []
    for key, spec in params["properties"].items():
        if spec.get(UNLISTED):
            continue
        text = key + ("" if key in required else "?")
        if "enum" in spec and key != "day":
            text += ": " + "|".join(spec["enum"])
        args.append(text)
    return f"{schema['name']}({', '.join(args)})"


def compact_prompt(profile: Profile, schemas: list[dict]) -> str:
    """The embedded model's system message: the business, the tools in one line each, the services."""
    return _COMPACT.format(name=profile.name, tools="\n".join(_signature(s) for s in schemas),
                           days="today|tomorrow|monday..sunday", services=", ".join(x.name for x in profile.services))


def system_prompt(profile: Profile, toolbox: Toolbox, style: str) -> str | None:
    """The system message for `style` (the engine's chat style): compact for the SmolLM2 brain, full for LLaDA and
    Dream, the business's name alone for a checkpoint in Parley's own layout (the tests' tiny models)."""
    if style == "parley":
        return f"You answer calls for {profile.name}."
    if style == "smollm":
        return compact_prompt(profile, (toolbox.schemas() if toolbox is not None else SCHEMAS))
    if style in ("llada", "dream"):
        tools = "\n".join(json.dumps(s, separators=(",", ":")) for s in toolbox.schemas())
        return _INSTRUCTIONS.format(name=profile.name, address=profile.address, phone=profile.phone,
                                    days=", ".join(DAYS), tools=tools)
    raise ValueError(f"unknown chat style {style!r}; valid: parley, smollm, llada, dream")


def recognizer_prompt(profile: Profile) -> str:
    """The business's own words, for the speech recognizer to expect (speech.asr.AsrOptions.prompt), said the way its
    transcripts read: its name, its opening hours written as its replies write times, its services and the other
    words callers use for them. "Thanks for calling Maple Street Hair Studio. We're open 9:00 AM to 6:00 PM, ... We do
    haircut, kids haircut, ... (cut, trim, ...)."

    NOTE: `python -m speech.bench vocabulary` (callers of two businesses in Piper's and three espeak-ng voices, clean
    and at 10 dB SNR, 2026-12-04): the salon's WER 0.231 -> 0.188, its service words missed 72 -> 33 of 128, noise
    alone heard as words ("you") 7 -> 0 of 20. As a bare list ("Maple Street Hair Studio, open ... Haircut, cut,
    trim, ..."), the same prompt made up more of the business's words than it saved (24 against 9 without a prompt:
    "Could you" heard "Cut, you"); as sentences, 7."""
    ranges = dict.fromkeys(f"{time_text(opens)} to {time_text(closes)}"
                           for opens, closes in (h for h in profile.hours.values() if h))
    names = [s.name for s in profile.services]
    aliases = dict.fromkeys(a for s in profile.services for a in s.aliases if a not in names)
    said = [f"Thanks for calling {profile.name}."]
    if ranges:
        said.append(f"We're open {', '.join(ranges)}.")
    said.append(f"We do {', '.join(names)}" + (f" ({', '.join(aliases)})." if aliases else "."))
    return " ".join(said)
