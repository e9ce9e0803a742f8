"""A business's profile (app.agent.profile) and the prompts made from it (app.agent.prompt): the model's system
message and the speech recognizer's."""
import pytest

from app.agent.profile import load_profile, parse_profile
from app.agent.prompt import recognizer_prompt, system_prompt
from app.agent.store import open_store
from app.agent.tools import Toolbox


def test_bad_profile_names_the_file_and_field(tmp_path):
    bad = tmp_path / "shop.yaml"
    bad.write_text("name: Shop\ntimezone: Mars/Olympus\naddress: x\nphone: '1'\nhours: {}\nservices: []\n")
    with pytest.raises(ValueError, match=r"shop.yaml: field 'timezone'"):
        load_profile(str(bad))
    with pytest.raises(ValueError, match=r"field 'hours.friday' has '9'; expected HH:MM"):
        parse_profile({"name": "S", "timezone": "UTC", "address": "a", "phone": "1", "hours": {"friday": "9-5"},
                       "services": [{"name": "cut", "duration_min": 30, "price": 10}]})
    with pytest.raises(ValueError, match="cannot read"):
        load_profile(str(tmp_path / "missing.yaml"))


def test_the_recognizers_prompt_says_the_businesss_name_hours_and_service_words():
    assert recognizer_prompt(load_profile(None)) == (
        "Thanks for calling Maple Street Hair Studio. We're open 9:00 AM to 6:00 PM, 9:00 AM to 8:00 PM, 9:00 AM to "
        "4:00 PM. We do haircut, kids haircut, beard trim, blow dry, hair coloring (cut, trim, hair cut, men's cut, "
        "women's cut, kids cut, children's haircut, haircut for my son, haircut for my daughter, beard, beard shave, "
        "shave, blowout, blow out, styling, color, colour, dye, hair color, highlights).")
    shop = parse_profile({"name": "Spokes", "timezone": "UTC", "address": "a", "phone": "1", "hours": {},
                          "services": [{"name": "tune-up", "duration_min": 60, "price": 65, "aliases": ["service"]},
                                       {"name": "flat", "duration_min": 30, "price": 15, "aliases": ["tune-up"]}]})
    assert recognizer_prompt(shop) == "Thanks for calling Spokes. We do tune-up, flat (service)."  # each word once


def test_system_prompt_styles():
    toolbox = Toolbox(load_profile(None), open_store(":memory:"))
    assert system_prompt(toolbox.profile, toolbox, "parley") == "You answer calls for Maple Street Hair Studio."
    full = system_prompt(toolbox.profile, toolbox, "llada")
    assert "<tool_call>" in full and '"name":"book_appointment"' in full
    with pytest.raises(ValueError, match="valid: parley, smollm, llada, dream"):
        system_prompt(toolbox.profile, toolbox, "gpt")
    # the adapter's prompt lists the tools as it was trained on them: a cancellation's time is held, not listed
    compact = system_prompt(toolbox.profile, toolbox, "smollm").splitlines()
    assert "cancel_appointment(name, day?)" in compact and "book_appointment(name, day, time, service)" in compact
