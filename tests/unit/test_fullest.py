"""A name called in the fullest form the caller gave it (app.agent.held.fullest): the whole name written after a
surname, never lengthened past what the caller wrote as a name, and the whole name a lookup found for a part."""
from app.agent.held import fullest
from app.agent.protocol import format_tool_call, tool_message
from app.agent.schemas import SCHEMAS


def _booked_by(*said: str, name: str) -> str:
    messages = [{"role": "system", "content": "You answer calls for a salon. Book, cancel, and tell the hours."}]
    for words in said:
        messages += [{"role": "user", "content": words}, {"role": "assistant", "content": "Can I have your name?"}]
    args = {"name": name, "day": "thursday", "time": "19:00", "service": "blow dry"}
    return fullest("book_appointment", args, SCHEMAS, messages[:-1])["name"]


def test_a_surname_then_the_whole_name_books_the_whole_name():
    assert _booked_by("García. Lucía García.", name="García") == "Lucía García"
    assert _booked_by("Sayed. Fatima Al-Sayed", name="Sayed") == "Fatima Al-Sayed"     # as it was written
    assert _booked_by("Lucía García.", name="Lucía García") == "Lucía García"


def test_a_name_is_not_lengthened_past_what_the_caller_wrote_as_a_name():
    assert _booked_by("Ahmed. My wife is Leila Haddad", name="Ahmed") == "Ahmed"     # no run holds it
    assert _booked_by("Rose. Rose, fine", name="Rose") == "Rose"                     # "fine" is no name
    assert _booked_by("Tom Baker please", name="Tom") == "Tom"                       # part of a run, not a run
    assert _booked_by("Dana Reyes.", "uh, Reyes. yes", name="Reyes") == "Reyes"      # the latest message only


def test_a_part_of_the_name_a_lookup_found_calls_the_whole_name():
    # "what appointments do I have? Ahmed Haddad" was looked up as "Haddad", found under Ahmed Haddad; then
    # "can I change it to 4?" was booked under "Haddad", beside the haircut it meant to move
    found = {"ok": True, "name": "Ahmed Haddad", "appointments": ["haircut on Thursday, December 10 at 2:00 PM"]}
    messages = [{"role": "user", "content": "what appointments do I have? Ahmed Haddad"},
                {"role": "assistant", "content": format_tool_call("list_appointments", {"name": "Haddad"})},
                tool_message("list_appointments", found),
                {"role": "assistant", "content": "You have a haircut on Thursday, December 10 at 2:00 PM."},
                {"role": "user", "content": "can I change it to 4?"}]
    args = {"name": "Haddad", "day": "thursday", "time": "16:00", "service": "haircut"}
    assert fullest("book_appointment", args, SCHEMAS, messages)["name"] == "Ahmed Haddad"
    assert fullest("book_appointment", args | {"name": "haddad"}, SCHEMAS, messages)["name"] == "Ahmed Haddad"
    # another name, a refused lookup, or two names the part could be, stay as written
    assert fullest("book_appointment", args | {"name": "Leila"}, SCHEMAS, messages)["name"] == "Leila"
    refused = tool_message("list_appointments", {"ok": False, "error": "There is no appointment under Ahmed Haddad."})
    assert fullest("book_appointment", args, SCHEMAS, [messages[0], refused, messages[-1]])["name"] == "Haddad"
    other = tool_message("book_appointment", {"ok": True, "name": "Leila Haddad", "service": "haircut",
                                              "when": "Thursday, December 10 at 2:30 PM", "price": "$35"})
    assert fullest("book_appointment", args, SCHEMAS, messages[:3] + [other] + messages[3:])["name"] == "Haddad"
