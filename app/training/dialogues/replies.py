"""What the agent says: one deterministic reply per situation, built from the tool result it is grounded in.

Deterministic on purpose: a masked-diffusion model commits many tokens per pass only where the reply is
predictable; several interchangeable wordings would split its confidence (and mix wordings mid-sentence).
"""

CAPABILITIES = ("I can help you book, check or cancel appointments, and answer questions about our hours, "
                "services and prices.")
ASK_SERVICE = "Sure, what service would you like?"
ASK_DAY = "What day would you like to come in?"
ASK_NAME = "Can I have your name, please?"
ASK_OTHER_NAME = "What name should I put it under?"  # someone else's booking in the same call
ASK_NAME_FOR_LOOKUP = "Sure, what name is the appointment under?"
ASK_CANCEL_DAY = "Which day should I cancel?"

SMALL_TALK = {
    "greeting": "Hello, thank you for calling {business}. How can I help you today?",
    "how_are_you": "I'm doing well, thank you. How can I help you today?",
    "thanks": "You're welcome! Is there anything else I can help you with?",
    "who_are_you": "I'm the virtual assistant for {business}. " + CAPABILITIES,
    "out_of_scope": "I'm sorry, I can't help with that. " + CAPABILITIES,
    "compliment": "Thank you, I'm so glad to hear that! Is there anything else I can help you with?",
}
# A phrase each small-talk reply must contain to fit its intent (used by `parley eval`).
SMALL_TALK_KEYS = {"greeting": "how can i help", "how_are_you": "doing well", "thanks": "welcome",
                   "who_are_you": "assistant", "out_of_scope": "can't help with that",
                   "compliment": "glad to hear"}


def ask_time(day: str) -> str:
    return f"What time {day} works for you?" if day in ("today", "tomorrow") else \
        f"What time on {day.capitalize()} works for you?"


def _refusal(error: str, follow_up: str = "") -> str:
    return " ".join(filter(None, ["I'm sorry.", error, follow_up]))


def reply_to(tool: str, args: dict, result: dict, business: str) -> str:
    """The spoken reply after `tool` returned `result`."""
    if not result.get("ok"):
        error = result.get("error", "")
        if tool in ("book_appointment", "check_availability"):
            follow = "Would another day work?" if "closed" in error or "fully booked" in error else (
                "Would one of those work?" if "nearest" in error else "Would another time work?")
            if "don't offer" in error:
                follow = "Which one would you like?"
            return _refusal(error, follow)
        if tool == "cancel_appointment" and "appointments:" in error:
            return _refusal(error, ASK_CANCEL_DAY)
        return _refusal(error)
    r = result
    if tool == "book_appointment":
        return f"You're all set, {r['name']}. Your {r['service']} is booked for {r['when']}."
    if tool == "check_availability":
        if "when" not in r:
            if r["free"] == "nothing":
                return f"I'm sorry, we're fully booked on {r['day']}. Would another day work?"
            return f"On {r['day']} we have openings from {r['free']}. What time would you like?"
        if r["available"]:
            return f"Yes, {r['when']} is free. Would you like me to book it?"
        if r["free"] == "nothing":
            return f"I'm sorry, {r['when']} is taken, and that day is fully booked. Would another day work?"
        return f"I'm sorry, {r['when']} is taken. The nearest free times are {r['free']}. Would one of those work?"
    if tool == "cancel_appointment":
        return f"Okay, {r['name']}. Your {r['cancelled']} is cancelled."
    if tool == "list_appointments":
        if not r["appointments"]:
            return f"I don't see any upcoming appointments under {r['name']}."
        return f"{r['name']}, you have a {' and a '.join(r['appointments'])}."
    if tool == "business_info":
        return _info_reply(r)
    if tool == "current_datetime":
        return f"It's {r['time']} on {r['date']}." if "time" in r else f"It's {r['date']}."
    if tool == "transfer_to_human":
        return "Of course. I'm transferring you to a member of our staff now."
    if tool == "end_call":
        return f"Thank you for calling {business}. Goodbye!"
    raise ValueError(f"no reply for tool {tool!r}")


def _info_reply(r: dict) -> str:
    if "day" in r:
        return f"We're closed on {r['day']}." if r["hours"] == "closed" else \
            f"On {r['day']} we're open from {r['hours']}."
    if "hours" in r:
        return f"We're open {r['hours']}."
    if "address" in r:
        return f"We're at {r['address']}."
    if "phone" in r:
        return f"Our phone number is {r['phone']}."
    if "services" in r:
        return f"We offer {r['services']}."
    if "price" in r:
        return f"A {r['service']} is {r['price']} and takes {r['duration']}."
    return f"Our prices are {r['prices']}."


def facts(tool: str, result: dict) -> list[str]:
    """The strings of `result` a grounded reply must state (case-insensitive): times, reasons, hours."""
    if not result.get("ok"):
        return [result.get("error", "").split(". ")[0].rstrip(".")]
    keys = {"book_appointment": ["when"], "cancel_appointment": ["cancelled"],
            "current_datetime": [k for k in ("time", "date") if k in result],  # a day asked: its date alone
            "list_appointments": ["appointments"]}.get(tool)
    if tool == "check_availability":
        keys = ["when"] if "when" in result else ["day"] + ([] if result["free"] == "nothing" else ["free"])
    if tool == "business_info":
        keys = [k for k in ("hours", "address", "phone", "services", "price", "prices") if k in result]
        keys = [] if result.get("hours") == "closed" else keys
    values = []
    for key in keys or ():
        value = result[key]
        values += value if isinstance(value, list) else [value]
    return [str(v) for v in values]
