"""How a caller names a business's service (app.agent.said's services, on app.agent.words' comparison of words):
by its name or an alias, with other endings, by the noun its name ends in, turned around; and a service a call
of the history holds stays said after the caller's words left the prompt's window."""
import re

from app.agent.held import held
from app.agent.profile import load_profile
from app.agent.protocol import format_tool_call, tool_message
from app.agent.said import Said, is_said, named_service, settle
from app.agent.store import open_store
from app.agent.tools import Toolbox

PROFILE = load_profile(None)


def test_services_are_said_by_the_profiles_names_and_aliases():
    assert is_said("beard trim", ["I need a beard shave"], PROFILE)
    assert is_said("hair coloring", ["do you do highlights?"], PROFILE)
    assert not is_said("hair coloring", ["I need a haircut"], PROFILE)


def test_a_service_of_several_words_is_said_with_other_endings_a_single_word_only_as_it_is():
    dentist = load_profile("app/profiles/dental_clinic.yaml")
    assert is_said("hair coloring", ["I wanna get my hair colored next tuesday"], PROFILE)   # "hair color"
    assert named_service(PROFILE, "hair colored").name == "hair coloring"
    assert Said(["I need my teeth cleaned, and whitened too"], dentist).services_named(
        [s.name for s in dentist.services]) == {"cleaning": ["teeth cleaning"]}            # not "teeth whitening"
    assert is_said("whitening", ["could I get my teeth whitened?"], dentist)
    assert not is_said("filling", ["can you fill me in on your hours?"], dentist)         # one word: as it is
    assert not is_said("haircut", ["how much for cutting my hair?"], PROFILE)


def test_a_service_is_named_by_the_verbal_noun_its_name_ends_in_where_nothing_else_is_named():
    names = [s.name for s in PROFILE.services]
    assert Said(["I'd like to book a coloring for wednesday"], PROFILE).services_named(names) == {
        "hair coloring": ["hair coloring"]}
    assert is_said("hair coloring", ["how much for, uh, coloring?"], PROFILE)
    assert named_service(PROFILE, "coloring").name == "hair coloring"
    assert Said(["a haircut, and a coloring"], PROFILE).services_named(names) == {"haircut": ["haircut"]}
    assert not is_said("blow dry", ["my hair is so dry"], PROFILE)            # a plain word: the caller's own
    optician = load_profile("app/profiles/eye_care.yaml")
    assert named_service(optician, "a fitting please").name == "contact lens fitting"
    bikes = load_profile("app/profiles/bike_repair.yaml")
    assert named_service(bikes, "can you repair my bike") is None           # "repair": no verbal noun
    assert named_service(bikes, "I need a truing").name == "wheel truing"


def test_a_service_of_several_words_is_named_turned_around_its_last_word_first():
    # "how much is a haircut for a kid?" was asked the haircut's price ($35), not the kids haircut's ($20)
    names = [s.name for s in PROFILE.services]
    assert Said(["how much is a haircut for a kid?"], PROFILE).services_named(names) == {
        "kids haircut": ["kids haircut"]}
    assert Said(["can you do a trim for my beard on friday?"], PROFILE).services_named(names) == {
        "beard trim": ["beard trim", "beard"]}                   # the haircut's alias "trim" is inside it
    assert Said(["I want a haircut and my kid wants one too"], PROFILE).services_named(names) == {
        "haircut": ["haircut"]}                                   # no preposition: two things said
    bikes = load_profile("app/profiles/bike_repair.yaml")
    assert is_said("brake adjustment", ["an adjustment on my brakes"], bikes)
    assert is_said("flat tire repair", ["a repair for a flat tire please"], bikes)
    optician = load_profile("app/profiles/eye_care.yaml")       # its last two words first
    assert Said(["do you do eye exams for kids?"], optician).services_named(
        [s.name for s in optician.services]) == {"kids eye exam": ["kids eye exam"]}


def test_a_service_is_named_by_saying_what_the_thing_is():
    # "my back wheel's wobbly ... can you fix that?" at a bike shop (its wheel truing's alias "wobbly wheel") named no
    # service, and a booking of it asked "what service would you like?"
    bikes = load_profile("app/profiles/bike_repair.yaml")
    assert is_said("wheel truing", ["my back wheel's wobbly, can you fix that?"], bikes)
    assert is_said("wheel truing", ["my back wheel is all wobbly"], bikes)
    assert is_said("flat tire repair", ["my tire is flat"], bikes)
    assert not is_said("wheel truing", ["my wheel is fine but it's wobbly"], bikes)    # what it is, said of another
    dentist = load_profile("app/profiles/dental_clinic.yaml")
    assert is_said("emergency exam", ["I think my tooth got broken"], dentist)          # "broken tooth"
    assert not is_said("emergency exam", ["my tooth is fine"], dentist)



def test_a_service_a_call_holds_stays_said_when_the_callers_words_left_the_window():
    """A long call's prompt window (Agent.prompt) moved past "a kids cut at 10:30 for Zofia Wojcik"; "ok then 11 for
    Jan", after Jan's kids haircut at 10:30 was taken, was forced to the service "well" and asked what service."""
    schemas = Toolbox(PROFILE, open_store(":memory:")).schemas()
    taken = {"name": "Jan Wojcik", "day": "saturday", "time": "10:30", "service": "kids haircut"}
    messages = [{"role": "user", "content": "and one at 10:30 as well for Jan Wojcik"},
                {"role": "assistant", "content": format_tool_call("book_appointment", taken)},
                tool_message("book_appointment", {"ok": False, "error": "Saturday at 10:30 AM is already taken."}),
                {"role": "assistant", "content": "I'm sorry. It's taken. Would 11:00 AM work?"},
                {"role": "user", "content": "ok then 11 for Jan"}]
    book = next(s for s in held(schemas, messages, PROFILE) if s["name"] == "book_appointment")
    assert re.fullmatch(book["parameters"]["properties"]["service"]["pattern"], "kids haircut")
    assert not re.fullmatch(book["parameters"]["properties"]["service"]["pattern"], "well")
    kept, missing = settle("book_appointment", taken | {"time": "11:00"}, schemas, messages, PROFILE)
    assert kept["service"] == "kids haircut" and missing == []
