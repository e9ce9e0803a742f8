"""The front-desk tools on the shipped profile: SQLite rules, day/time resolution in the profile's timezone."""
import sqlite3
import threading
from datetime import date, datetime, time, timedelta, timezone

import pytest

from app.agent.profile import load_profile
from app.agent.store import Store, open_store
from app.agent.loop import Agent
from app.agent.days import parse_time, resolve_day
from app.agent.prompt import system_prompt
from app.agent.tools import STORE_DOWN, Toolbox
from tests.fakes import FakeEngine

# Tuesday 1 December 2026, 10:00 in New York (the shipped profile's zone). Open Tue-Sat; closed Sun, Mon.
NOW = datetime(2026, 12, 1, 10, 0)


@pytest.fixture
def toolbox():
    store = open_store(":memory:")
    yield Toolbox(load_profile(None), store, now=lambda: NOW)
    store.close()


def book(toolbox, name="Maria", day="friday", time="15:30", service="haircut"):
    return toolbox.call("book_appointment", {"name": name, "day": day, "time": time, "service": service})


def test_booking_is_stored_and_listed(toolbox):
    result = book(toolbox)
    assert result == {"ok": True, "name": "Maria", "service": "haircut", "when": "Friday, December 4 at 3:30 PM",
                      "price": "$35"}
    listed = toolbox.call("list_appointments", {"name": "maria"})
    assert listed["appointments"] == ["haircut on Friday, December 4 at 3:30 PM"]
    assert toolbox.call("list_appointments", {"name": "Tom"})["appointments"] == []


def test_double_booking_is_refused_with_nearest_free_times(toolbox):
    assert book(toolbox)["ok"]
    refused = book(toolbox, name="Tom", time="15:45", service="beard trim")
    assert refused == {"ok": False, "error": "Friday, December 4 at 3:45 PM is already taken. "
                                             "The nearest free times are 3:00 PM and 4:00 PM."}
    # a 90-minute coloring from 14:30 would run into Maria's 15:30 haircut
    assert not book(toolbox, name="Ann", time="14:30", service="hair coloring")["ok"]
    assert book(toolbox, name="Ann", time="14:00", service="beard trim")["ok"]
    assert len(toolbox.store.on_date(date(2026, 12, 4))) == 2


def test_a_service_booked_again_that_day_under_the_same_name_moves_there(toolbox):
    # "book a haircut thursday at 2, I'm Omar Haddad", then "actually can you make that 3 instead?" left both
    assert book(toolbox, time="14:00")["ok"]
    moved = book(toolbox, name="maria", time="14:30")       # overlaps only its own old time
    assert moved == {"ok": True, "name": "Maria", "service": "haircut", "when": "Friday, December 4 at 2:30 PM",
                     "price": "$35"}                          # the name it is booked under
    assert [(a.name, a.start.time()) for a in toolbox.store.all()] == [("Maria", time(14, 30))]
    assert book(toolbox, time="14:30")["ok"] and len(toolbox.store.all()) == 1   # the same again: the one they have
    # a time taken by someone else: refused as any booking is, and the first stays where it was
    assert book(toolbox, name="Tom", time="16:00")["ok"]
    assert not book(toolbox, time="16:00")["ok"]
    assert {(a.name, a.start.time()) for a in toolbox.store.all()} == {("Maria", time(14, 30)), ("Tom", time(16, 0))}
    # a preview says the move and makes none
    assert toolbox.preview("book_appointment", {"name": "Maria", "day": "friday", "time": "11:00",
                                                "service": "haircut"})["when"] == "Friday, December 4 at 11:00 AM"
    assert {a.start.time() for a in toolbox.store.all()} == {time(14, 30), time(16, 0)}
    # another service is another booking; the same on another day moves it ("can you move my appointment to
    # friday at 3?" had booked Friday and kept Thursday): one upcoming booking of a service a person
    assert book(toolbox, time="11:00", service="beard trim")["ok"]
    assert book(toolbox, day="saturday", time="11:00")["ok"]
    assert sorted((a.service, a.start) for a in toolbox.store.for_name("Maria")) == [
        ("beard trim", datetime(2026, 12, 4, 11, 0)), ("haircut", datetime(2026, 12, 5, 11, 0))]


def test_a_caller_is_found_under_part_of_their_name_or_without_its_accents(toolbox):
    # "what appointments do I have? Ahmed Haddad" had the model look up "Haddad", and find nothing
    assert book(toolbox, name="Ahmed Haddad", time="14:00")["ok"]
    assert book(toolbox, name="Lucía García", time="16:00")["ok"]
    listed = toolbox.call("list_appointments", {"name": "haddad"})
    assert listed == {"ok": True, "name": "Ahmed Haddad", "appointments": ["haircut on Friday, December 4 at 2:00 PM"]}
    assert toolbox.call("list_appointments", {"name": "Lucia Garcia"})["name"] == "Lucía García"
    assert toolbox.call("list_appointments", {"name": "Ahmed Haddad Smith"})["appointments"] == []  # a word too many
    assert toolbox.call("list_appointments", {"name": "Ahmad"})["appointments"] == []              # another name
    # a surname two people share: neither's bookings are told, the whole name is asked for
    assert book(toolbox, name="Leila Haddad", time="15:00")["ok"]
    refused = toolbox.call("list_appointments", {"name": "Haddad"})
    assert refused == {"ok": False, "error": "More than one person is booked under Haddad. What is the whole name?"}
    # a change takes the whole name: "Ahmed" may be another Ahmed
    refused = toolbox.call("cancel_appointment", {"name": "Ahmed"})
    assert refused == {"ok": False, "error": "No appointment is booked under Ahmed alone. What is the whole name?"}
    assert book(toolbox, name="Ahmed", time="17:00")["name"] == "Ahmed"     # one more booking, Ahmed Haddad's stays
    assert len(toolbox.store.all()) == 4
    assert toolbox.call("cancel_appointment", {"name": "leila haddad"})["cancelled"] == \
        "haircut on Friday, December 4 at 3:00 PM"
    assert book(toolbox, name="Lucia Garcia", time="18:00")["name"] == "Lucía García"   # moved, accents aside
    assert sorted((a.name, a.start.time()) for a in toolbox.store.all()) == [
        ("Ahmed", time(17, 0)), ("Ahmed Haddad", time(14, 0)), ("Lucía García", time(18, 0))]


def test_a_preview_says_what_a_call_would_and_changes_nothing(toolbox):
    booking = {"name": "Maria", "day": "friday", "time": "15:30", "service": "haircut"}
    previewed = toolbox.preview("book_appointment", booking)
    assert toolbox.store.all() == []                                   # not booked
    assert previewed == book(toolbox) and len(toolbox.store.all()) == 1  # what the booking then said
    # the slot is taken now: the preview says so as the booking would, with the nearest free times
    assert toolbox.preview("book_appointment", dict(booking, name="Tom")) == book(toolbox, name="Tom")
    cancel = {"name": "Maria"}
    assert toolbox.preview("cancel_appointment", cancel) == {"ok": True, "name": "Maria",
                                                               "cancelled": "haircut on Friday, December 4 at 3:30 PM"}
    assert len(toolbox.store.all()) == 1                               # not cancelled
    assert toolbox.preview("business_info", {"topic": "address"}) == toolbox.call("business_info", {"topic": "address"})
    assert toolbox.preview("no_such_tool", {}) is None


def test_outside_hours_closed_day_past_and_unknown_service_are_refused(toolbox):
    assert book(toolbox, time="08:30")["error"] == "On Friday we're open 9:00 AM to 8:00 PM."
    # a coloring at 19:00 would end after the 20:00 close
    assert not book(toolbox, time="19:00", service="hair coloring")["ok"]
    assert book(toolbox, day="monday")["error"] == "We're closed on Mondays."
    assert book(toolbox, day="today", time="09:30")["error"] == "Tuesday, December 1 at 9:30 AM has already passed."
    refused = book(toolbox, service="massage")
    assert refused["error"].startswith("We don't offer massage. We offer haircut, kids haircut")
    assert toolbox.store.all() == []


def test_a_call_lacking_details_is_refused_on_those_it_has(toolbox):
    """A front desk says "we don't offer waxing" or "we're closed Mondays" before asking for a name or a time
    (Agent._lacking_result); a detail it would take, or a closed day for a tool that takes no slot, is no refusal."""
    assert toolbox.refusal("book_appointment", {"service": "eyebrow waxing", "day": "wednesday"}) == {
        "ok": False, "error": "We don't offer eyebrow waxing. We offer haircut, kids haircut, beard trim, blow dry "
                              "and hair coloring."}
    assert "closed on Mondays" in toolbox.refusal("book_appointment", {"service": "shave", "day": "monday"})["error"]
    assert "closed on Mondays" in toolbox.refusal("check_availability", {"day": "monday"})["error"]
    assert toolbox.refusal("book_appointment", {"service": "shave", "day": "friday"}) is None
    assert toolbox.refusal("cancel_appointment", {"day": "monday"}) is None
    assert toolbox.refusal("book_appointment", {}) is None


def test_a_booking_lacking_a_name_is_refused_a_time_it_could_not_have(toolbox):
    """"Can I get a haircut on Saturday at 5 PM?" with no name: the caller hears that Saturday closes at 4, or that
    the time is taken and which are free, before being asked their name; a free time is no refusal."""
    assert book(toolbox)["ok"]                                              # Friday 3:30 PM, 30 minutes
    assert toolbox.refusal("book_appointment", {"service": "haircut", "day": "saturday", "time": "17:00"}) == {
        "ok": False, "error": "On Saturday we're open 9:00 AM to 4:00 PM."}
    assert toolbox.refusal("book_appointment", {"day": "friday", "time": "15:45"}) == {
        "ok": False, "error": "Friday, December 4 at 3:45 PM is already taken. "
                              "The nearest free times are 3:00 PM and 4:00 PM."}
    # the service's own length: a 90-minute coloring from 2:30 runs into the 3:30 haircut, a trim does not
    assert "taken" in toolbox.refusal("book_appointment", {"service": "hair coloring", "day": "friday",
                                                           "time": "14:30"})["error"]
    assert toolbox.refusal("book_appointment", {"service": "beard trim", "day": "friday", "time": "14:30"}) is None
    assert "passed" in toolbox.refusal("book_appointment", {"day": "today", "time": "09:00"})["error"]
    assert toolbox.refusal("book_appointment", {"day": "friday", "time": "10:00"}) is None
    assert toolbox.refusal("cancel_appointment", {"day": "friday", "time": "15:30"}) is None   # takes no slot


def test_a_detail_asked_for_again_has_the_look_up_of_its_choices(toolbox):
    """Asked for a detail and answered without it, the caller hears what they may choose from (Agent.respond):
    a time, the free times of the call's day; a day, the opening hours; a service, the services. A name, or a
    time with no day to look in, has no such list."""
    booking = {"service": "haircut", "day": "friday"}
    assert toolbox.choices("book_appointment", booking, ["time", "name"]) == ("check_availability", {"day": "friday"})
    assert toolbox.choices("book_appointment", {"service": "haircut"}, ["day", "time"]) == (
        "business_info", {"topic": "hours"})
    assert toolbox.choices("book_appointment", {}, ["service"]) == ("business_info", {"topic": "services"})
    assert toolbox.choices("check_availability", {}, ["day"]) == ("business_info", {"topic": "hours"})
    assert toolbox.choices("book_appointment", {"service": "haircut"}, ["time"]) is None
    assert toolbox.choices("book_appointment", booking | {"time": "10:00"}, ["name"]) is None
    assert toolbox.choices("cancel_appointment", {}, ["name"]) is None
    assert toolbox.choices("list_appointments", {}, ["name"]) is None
    assert toolbox.choices("book_appointment", booking, []) is None


def test_aliases_map_to_the_canonical_service(toolbox):
    assert book(toolbox, service="Highlights")["service"] == "hair coloring"


def test_a_service_named_among_other_words_is_that_service_the_longest_name_first(toolbox):
    # the model's argument may carry the caller's verb or article along ("book a haircut")
    assert book(toolbox, service="book a haircut")["service"] == "haircut"
    assert book(toolbox, time="16:00", service="a kids haircut please")["service"] == "kids haircut"
    assert book(toolbox, time="16:30", service="Beard trims")["service"] == "beard trim"
    assert book(toolbox, time="17:00", service="a massage")["error"].startswith("We don't offer a massage.")


def test_cancel_one_then_ask_which_day_when_several(toolbox):
    assert toolbox.call("cancel_appointment", {"name": "Maria"}) == {
        "ok": False, "error": "There is no appointment under Maria."}
    book(toolbox)
    book(toolbox, day="saturday", time="10:00", service="beard trim")
    several = toolbox.call("cancel_appointment", {"name": "Maria"})
    assert several["error"].startswith("Maria has 2 appointments: haircut on Friday, December 4 at 3:30 PM")
    done = toolbox.call("cancel_appointment", {"name": "maria", "day": "saturday"})
    assert done == {"ok": True, "name": "Maria", "cancelled": "beard trim on Saturday, December 5 at 10:00 AM"}
    assert [a.start for a in toolbox.store.all()] == [datetime(2026, 12, 4, 15, 30)]


def test_a_cancellation_at_a_time_no_booking_has_keeps_the_booking(toolbox):
    # "I'll call back at 4, bye" after a booking at 3 was called as a cancellation at 4 PM, and cancelled the 3
    book(toolbox)
    assert toolbox.call("cancel_appointment", {"name": "Maria", "day": "friday", "time": "16:00"}) == {
        "ok": False, "error": "There is no appointment under Maria on Friday at 4:00 PM."}
    assert [a.start for a in toolbox.store.all()] == [datetime(2026, 12, 4, 15, 30)]
    assert toolbox.call("cancel_appointment", {"name": "Maria", "time": "15:30"})["cancelled"] == \
        "haircut on Friday, December 4 at 3:30 PM"
    assert toolbox.store.all() == []


def test_availability_lists_free_ranges_and_checks_one_time(toolbox):
    book(toolbox)
    free = toolbox.call("check_availability", {"day": "friday"})
    assert free == {"ok": True, "day": "Friday, December 4", "free": "9:00 AM to 3:30 PM and 4:00 PM to 8:00 PM"}
    assert toolbox.call("check_availability", {"day": "friday", "time": "15:30"})["available"] is False
    assert toolbox.call("check_availability", {"day": "friday", "time": "16:00"})["available"] is True
    today = toolbox.call("check_availability", {"day": "today"})  # from now (10:00) on
    assert today["free"] == "10:00 AM to 6:00 PM"
    # past the day's last start (Tuesday closes at 6:00 PM), it is over, not "fully booked"
    late = Toolbox(toolbox.profile, toolbox.store, now=lambda: NOW.replace(hour=17, minute=50))
    assert late.call("check_availability", {"day": "today"}) == {
        "ok": False, "error": "We're closed for the rest of today."}
    # a weekday named on that day once it is over is that weekday next week; "today" is still today
    evening = Toolbox(toolbox.profile, toolbox.store, now=lambda: NOW.replace(hour=18, minute=30))
    assert book(evening, name="Eve", day="tuesday", time="11:30")["when"] == "Tuesday, December 8 at 11:30 AM"
    assert "has already passed" in book(evening, name="Eve", day="today", time="11:30")["error"]
    assert evening.call("check_availability", {"day": "tuesday"})["day"] == "Tuesday, December 8"
    assert late.call("check_availability", {"day": "tuesday"}) == late.call("check_availability", {"day": "today"})
    busy = Toolbox(toolbox.profile, toolbox.store, now=lambda: NOW.replace(hour=16))
    for i, at in enumerate(("16:00", "16:30", "17:00", "17:30")):
        book(busy, name=f"Caller {i}", day="today", time=at)
    assert busy.call("check_availability", {"day": "today"})["free"] == "nothing"


def test_days_resolve_in_the_profile_timezone():
    profile = load_profile(None)
    # 03:00 UTC on Wednesday is still Tuesday 22:00 in New York
    late = Toolbox(profile, open_store(":memory:"), now=lambda: datetime(2026, 12, 2, 3, 0, tzinfo=timezone.utc))
    assert late.call("current_datetime", {}) == {"ok": True, "date": "Tuesday, December 1", "time": "10:00 PM"}
    assert late.call("current_datetime", {"day": "tomorrow"}) == {"ok": True, "date": "Wednesday, December 2"}
    assert late.call("check_availability", {"day": "tomorrow"})["day"] == "Wednesday, December 2"
    today = date(2026, 12, 1)  # a Tuesday
    assert resolve_day("tuesday", today) == today  # today counts as the next Tuesday
    assert resolve_day("Monday", today) == date(2026, 12, 7)
    assert resolve_day("tomorrow", today) == date(2026, 12, 2)


def test_times_parse_in_24_hours_and_lenient_forms():
    assert parse_time("15:30") == time(15, 30)
    assert parse_time("3:30 pm") == time(15, 30)
    assert parse_time("12 a.m.") == time(0, 0)
    assert parse_time("9") == time(9, 0)


def test_business_info_topics(toolbox):
    assert toolbox.call("business_info", {"topic": "hours", "day": "saturday"}) == {
        "ok": True, "day": "Saturday", "hours": "9:00 AM to 4:00 PM"}
    assert toolbox.call("business_info", {"topic": "hours", "day": "sunday"})["hours"] == "closed"
    assert "closed Monday and Sunday" in toolbox.call("business_info", {"topic": "hours"})["hours"]
    assert toolbox.call("business_info", {"topic": "prices", "service": "trim"})["price"] == "$35"
    # the hours with a service named (held.held writes the service a question names) are the opening hours:
    # "I'd like my teeth whitened, what days are you open?"
    assert toolbox.call("business_info", {"topic": "hours", "service": "color"}) == toolbox.call(
        "business_info", {"topic": "hours"})
    assert toolbox.call("business_info", {"topic": "address"})["address"] == "214 Maple Street, Springfield"
    assert "not 'parking'" in toolbox.call("business_info", {"topic": "parking"})["error"]
    # the services with one asked of ("do you do kids eye exams?") name it first, as the reply does: "We offer
    # kids eye exam, contact lens fitting, glasses adjustment and kids eye exam." had read it twice
    assert toolbox.call("business_info", {"topic": "services", "service": "kids cut"})["services"] == \
        "kids haircut, haircut, beard trim, blow dry and hair coloring"
    assert toolbox.call("business_info", {"topic": "services", "service": "nails"})["services"] == \
        toolbox.call("business_info", {"topic": "services"})["services"] == \
        "haircut, kids haircut, beard trim, blow dry and hair coloring"


def test_bad_calls_get_a_reason_never_an_exception(toolbox):
    assert "Unknown tool 'fly'" in toolbox.call("fly", {})["error"]
    assert toolbox.call("book_appointment", {"name": "Al"})["error"] == \
        "book_appointment needs the service, day and time."
    assert "takes no argument 'color'" in toolbox.call("list_appointments", {"name": "A", "color": "red"})["error"]
    assert "not 'someday'" in book(toolbox, day="someday")["error"]
    assert "24-hour clock" in book(toolbox, time="teatime")["error"]
    assert toolbox.call("book_appointment", {"name": 3, "day": "friday", "time": "15:00", "service": "x"})["ok"] is False
    assert toolbox.call("end_call", {}) == {"ok": True, "action": "end_call"}
    assert toolbox.call("transfer_to_human", {}) == {"ok": True, "action": "transfer_to_human"}


def test_store_persists_in_a_file(tmp_path):
    path = tmp_path / "nested" / "appointments.sqlite3"
    profile = load_profile(None)
    first = Toolbox(profile, open_store(str(path)), now=lambda: NOW)
    assert book(first)["ok"]
    first.store.close()
    again = Toolbox(profile, open_store(str(path)), now=lambda: NOW)
    assert again.call("list_appointments", {"name": "Maria"})["appointments"]


def test_the_same_slot_booked_from_two_servers_at_once_is_booked_once(tmp_path):
    # two connections to one file, as two `parley serve` processes would hold; each slot is tried by both at once
    path = str(tmp_path / "appointments.sqlite3")
    stores = [open_store(path), open_store(path)]
    slots = [datetime(2026, 12, 4, 9, 0) + timedelta(minutes=30 * i) for i in range(20)]
    start_together = threading.Barrier(2)
    booked = [[], []]

    def caller(i):
        for slot in slots:
            start_together.wait()
            try:
                booked[i].append(stores[i].add(f"caller {i}", "haircut", slot, 30).start)
            except ValueError:
                pass

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(booked[0] + booked[1]) == slots          # every slot went to exactly one caller
    assert [a.start for a in stores[0].all()] == slots


def test_a_read_only_appointment_book_is_reported_and_loses_nothing(tmp_path):
    path = tmp_path / "appointments.sqlite3"
    profile = load_profile(None)
    writable = Toolbox(profile, open_store(str(path)), now=lambda: NOW)
    assert book(writable)["ok"]
    writable.store.close()
    read_only = Toolbox(profile, Store(sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                                                       isolation_level=None)), now=lambda: NOW)
    refused = book(read_only, name="Tom", time="11:00")
    assert refused == {"ok": False, "error": STORE_DOWN}
    assert toolbox_cancel(read_only, "Maria") == {"ok": False, "error": STORE_DOWN}
    assert [a.name for a in read_only.store.all()] == ["Maria"]   # still readable, nothing lost
    assert read_only.call("list_appointments", {"name": "Maria"})["ok"]


def toolbox_cancel(toolbox, name):
    return toolbox.call("cancel_appointment", {"name": name})


class WithParking(Toolbox):
    """A business with one more tool: its schema and its method, nothing else."""

    TOOLS = Toolbox.TOOLS + [{"name": "parking_info", "description": "Where callers can park.",
                              "parameters": {"type": "object", "properties": {}}}]

    def _parking_info(self) -> dict:
        return {"parking": "Free parking behind the building."}


def test_a_new_tool_is_one_schema_and_one_method(toolbox):
    box = WithParking(toolbox.profile, toolbox.store, now=lambda: NOW)
    assert "parking_info" in [s["name"] for s in box.schemas()]
    assert "parking_info" in system_prompt(box.profile, box, "smollm")   # the brain's prompt lists it
    assert "parking_info" in system_prompt(box.profile, box, "llada")
    assert box.call("parking_info", {}) == {"ok": True, "parking": "Free parking behind the building."}
    assert box.call("parking_info", {"level": "2"})["ok"] is False
    assert box.preview("parking_info", {}) is None   # a draft runs it only once listed in READ_ONLY or PREVIEWED

    def script(messages):   # the model asks for the new tool, then speaks its result
        if messages[-1]["role"] == "tool":
            return "You can park for free behind the building."
        return '<tool_call>{"name": "parking_info", "arguments": {}}</tool_call>'

    turn = Agent(FakeEngine(script), box, None).respond("Where do I park?")
    assert [(c.name, c.result["ok"]) for c in turn.tool_calls] == [("parking_info", True)]
    assert turn.reply == "You can park for free behind the building."
    assert Toolbox(toolbox.profile, toolbox.store).call("parking_info", {})["ok"] is False   # the salon has none


def test_upcoming_appointments_start_at_or_after_the_moment_asked():
    store = open_store(":memory:")
    store.add("Maria", "haircut", datetime(2026, 12, 8, 10, 20), 30)
    store.add("Omar", "haircut", datetime(2026, 12, 8, 11, 0), 30)
    assert [a.name for a in store.upcoming(datetime(2026, 12, 8, 10, 20))] == ["Maria", "Omar"]
    assert [a.name for a in store.upcoming(datetime(2026, 12, 8, 10, 20, 30))] == ["Omar"]  # 10:20 has begun
    assert store.upcoming(datetime(2026, 12, 8, 11, 0, 0, 1)) == []
