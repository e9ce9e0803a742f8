"""What the brain's drafter studies at start (app.training.recipe.study): the dialogues written for the business."""
import logging

from app.agent.profile import load_profile
from app.training.recipe import study

ONE_HOUR_A_WEEK = """
name: Solo Tattoo
timezone: Europe/London
address: 1 High St
phone: "020 7946 0000"
currency: "£"
hours: {monday: closed, tuesday: closed, wednesday: closed, thursday: closed, friday: closed,
        saturday: "12:00-13:00", sunday: closed}
services:
  - {name: consultation, duration_min: 60, price: 0}
"""


class Studying:
    def __init__(self):
        self.studied = []

    def study(self, conversations):
        self.studied.append(conversations)


def test_the_dialogues_studied_are_the_business_own_without_their_system_message():
    engine = Studying()
    study(engine, load_profile("app/profiles/bike_repair.yaml"), dialogues=5)
    [conversations] = engine.studied
    assert len(conversations) == 5 and all(c[0]["role"] == "system" for c in conversations)
    text = " ".join(m["content"] for c in conversations for m in c[1:])
    assert any(name in text for name in ("tune-up", "flat tire repair", "brake adjustment", "wheel truing"))
    assert "Spoke & Chain Bike Repair" in conversations[0][0]["content"]


def test_a_business_the_dialogue_writer_cannot_serve_still_starts(tmp_path, caplog):
    """Open one hour a week: the writer finds no slot to book and raises; the server starts all the same, its
    guesses from the calls alone."""
    path = tmp_path / "solo.yaml"
    path.write_text(ONE_HOUR_A_WEEK, encoding="utf-8")
    engine = Studying()
    with caplog.at_level(logging.WARNING, logger="app.training.recipe"):
        study(engine, load_profile(str(path)), dialogues=300)
    assert engine.studied == []
    assert "no dialogues to study for Solo Tattoo" in caplog.text
