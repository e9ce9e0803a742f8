"""The system message a model reads: the business and its tools, compact for the embedded SmolLM2 brain, in full
for LLaDA and Dream."""
import json

from app.agent.profile import Profile
from app.agent.tools import DAYS, SCHEMAS, Toolbox


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
