"""Other businesses to write training dialogues for (Style.other_businesses): a profile made up per dialogue from
a kind of business, with its own name, services, prices, hours, address and phone.

Every shipped training dialogue used to be the salon's, and the adapter answered the salon's follow-up questions
but took the same questions at the bike shop for bookings. With made-up businesses in the mix it has to read the
services from its prompt and the facts from the tools. Bike repair and dental clinics are left out on purpose:
they are the kinds `app/profiles/bike_repair.yaml` and the tests use to show a profile that training never saw.
"""
import random
from dataclasses import dataclass

from app.agent.profile import WEEKDAYS, Profile, parse_profile
from app.training.dialogues import phrases, variants


@dataclass(frozen=True)
class Kind:
    place: str                  # what callers call it ("Is the studio open?")
    worker: str                 # who they ask for ("Can I speak to a groomer?")
    names: tuple[str, ...]      # "{x}": a surname or a street name
    services: tuple[tuple[str, int, int, tuple[str, ...]], ...]  # name, minutes, price, aliases


KINDS = (
    Kind("shop", "groomer", ("{x} Pet Grooming", "{x} Paws Grooming", "The {x} Dog Spa"), (
        ("dog bath", 45, 40, ("bath", "wash", "dog wash")),
        ("full groom", 90, 75, ("grooming", "full grooming", "groom")),
        ("nail clipping", 15, 15, ("nail trim", "nails", "claw trim")),
        ("teeth cleaning", 20, 25, ("teeth brushing", "dental cleaning")),
        ("de-shedding treatment", 60, 55, ("deshedding", "shedding treatment")),
        ("puppy trim", 45, 45, ("puppy cut", "puppy groom")))),
    Kind("studio", "therapist", ("{x} Massage Studio", "{x} Wellness", "{x} Body Works"), (
        ("swedish massage", 60, 80, ("relaxing massage", "full body massage")),
        ("deep tissue massage", 60, 95, ("deep tissue", "sports massage")),
        ("hot stone massage", 75, 110, ("hot stones", "stone massage")),
        ("foot massage", 30, 45, ("reflexology", "foot rub")),
        ("back and neck massage", 30, 50, ("neck massage", "back massage")),
        ("facial", 45, 65, ("skin treatment",)))),
    Kind("garage", "mechanic", ("{x} Auto Repair", "{x} Garage", "{x} Car Care"), (
        ("oil change", 30, 45, ("oil", "oil service")),
        ("tire rotation", 30, 30, ("rotate tires", "tire swap")),
        ("brake inspection", 45, 50, ("brake check", "brakes")),
        ("battery replacement", 30, 120, ("new battery", "battery")),
        ("wheel alignment", 60, 90, ("alignment",)),
        ("car inspection", 60, 70, ("inspection", "safety inspection")))),
    Kind("salon", "nail tech", ("{x} Nail Bar", "{x} Nails", "Polished on {x}"), (
        ("manicure", 30, 25, ("mani", "nails done")),
        ("pedicure", 45, 35, ("pedi",)),
        ("gel manicure", 45, 40, ("gel nails", "gels", "shellac")),
        ("nail art", 30, 15, ("nail design", "designs")),
        ("acrylic full set", 75, 55, ("acrylics", "full set", "acrylic nails")),
        ("eyebrow waxing", 15, 15, ("brow wax", "eyebrows")))),
    Kind("clinic", "physio", ("{x} Physiotherapy", "{x} Physio Clinic", "{x} Sports Therapy"), (
        ("initial assessment", 60, 90, ("assessment", "first visit", "first appointment")),
        ("follow-up session", 30, 60, ("follow up", "treatment session", "follow-up")),
        ("sports massage", 45, 70, ("massage",)),
        ("dry needling", 30, 55, ("needling", "acupuncture")),
        ("posture check", 30, 40, ("posture assessment",)))),
    Kind("shop", "barber", ("{x} Barbers", "{x} Barber Shop", "The {x} Barber"), (
        ("men's haircut", 30, 30, ("haircut", "cut", "trim")),
        ("skin fade", 45, 35, ("fade",)),
        ("beard trim", 15, 15, ("beard", "beard tidy")),
        ("hot towel shave", 30, 35, ("shave", "straight razor shave", "wet shave")),
        ("buzz cut", 15, 20, ("buzz", "clipper cut")),
        ("kids haircut", 30, 20, ("kids cut", "boys haircut")))),
    Kind("shop", "technician", ("{x} Computer Repair", "{x} PC Clinic", "{x} Tech Fix"), (
        ("diagnostic", 30, 40, ("diagnosis", "check up", "checkup")),
        ("screen replacement", 60, 120, ("new screen", "cracked screen", "screen repair")),
        ("virus removal", 60, 80, ("malware removal", "virus cleanup")),
        ("data recovery", 120, 150, ("recover my files", "file recovery")),
        ("laptop cleaning", 30, 35, ("fan cleaning", "cleaning")))),
    Kind("center", "tutor", ("{x} Learning Center", "{x} Tutoring", "{x} Study Hub"), (
        ("math tutoring", 60, 50, ("math", "maths", "algebra help")),
        ("reading tutoring", 60, 45, ("reading", "reading help")),
        ("sat prep", 90, 80, ("test prep", "sat", "exam prep")),
        ("essay coaching", 45, 40, ("essay help", "writing help")),
        ("spanish lesson", 60, 45, ("spanish", "spanish class")))),
    Kind("studio", "instructor", ("{x} Yoga", "{x} Pilates Studio", "{x} Movement Studio"), (
        ("private yoga class", 60, 70, ("private yoga", "private class", "one on one yoga")),
        ("pilates session", 50, 60, ("pilates", "reformer pilates")),
        ("intro class", 45, 20, ("beginner class", "first class", "trial class")),
        ("meditation session", 30, 25, ("meditation",)),
        ("stretch session", 30, 35, ("stretching", "assisted stretch")))),
    Kind("shop", "detailer", ("{x} Car Wash", "{x} Auto Detailing", "{x} Shine"), (
        ("exterior wash", 30, 20, ("wash", "car wash", "basic wash")),
        ("interior cleaning", 45, 40, ("interior", "inside cleaning", "vacuum")),
        ("full detail", 120, 150, ("detailing", "full detailing", "detail")),
        ("hand wax", 45, 35, ("wax", "waxing")),
        ("headlight restoration", 30, 45, ("headlights", "headlight polish")))),
)

_X = """Oak Cedar Willow Harbor Summit Riverside Elm Lakeside Birch Park Hill Maple Pine Main Sunset Bay Granite Lincoln
Jefferson Franklin Meadow Highland Union Broadway Orchard Spring Chestnut Alder Juniper Coral Bridge Station Mill
Greenway Northside Westfield Ashford Kingsley Carver Rivera Okoro Lindqvist Tanaka Moreau Brennan Castillo""".split()
_STREETS = ("Street", "Avenue", "Road", "Lane", "Boulevard", "Drive", "Way")
_CITIES = """Springfield Riverton Fairview Oakdale Brookside Greenville Lakewood Milford Ashland Clayton Dover Eastport
Franklin Georgetown Hudson Kingston Madison Newport Salem Westbrook""".split()
_ZONES = ("America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles", "America/Phoenix")

# A caller's compliment at a made-up business ({service}: one of its services by name); the salon's compliments
# are about hair (templates.COMPLIMENT).
COMPLIMENTS = variants.expand("[I just wanted to say|Just calling to say|I wanted to tell you] [my|the] {service} "
                              "[last week|last time|yesterday|] was [great|amazing|perfect|fantastic].") + \
    variants.expand("[Your|The] {worker} did [a great|an amazing|a wonderful] job [last time|last week|].") + \
    variants.expand("[I love|We love|I really like] your {place}[, honestly|, thank you|].")


def made_up_profile(rng: random.Random) -> tuple[Profile, Kind]:
    """A business of a random kind: 3-6 of its services at prices near the kind's, open 4-6 days a week."""
    kind = rng.choice(KINDS)
    n = rng.randint(min(3, len(kind.services)), len(kind.services))
    services = [kind.services[i] for i in sorted(rng.sample(range(len(kind.services)), n))]
    opens, closes = rng.choice(("08:00", "08:30", "09:00", "09:00", "10:00")), rng.choice(("17:00", "18:00", "19:00"))
    days = set(rng.sample(WEEKDAYS[:6], rng.randint(4, 6))) | ({"sunday"} if rng.random() < 0.15 else set())
    hours = {d: (f"{opens}-{closes}" if d in days else "closed") for d in WEEKDAYS}
    if "saturday" in days and rng.random() < 0.5:
        hours["saturday"] = f"{opens}-{rng.choice(('13:00', '14:00', '15:00', '16:00'))}"
    data = {
        "name": rng.choice(kind.names).format(x=rng.choice(_X)),
        "timezone": rng.choice(_ZONES),
        "address": f"{rng.randint(2, 1999)} {rng.choice(_X)} {rng.choice(_STREETS)}, {rng.choice(_CITIES)}",
        "phone": f"555-{rng.randint(100, 999):03d}{rng.randint(0, 9)}",
        "hours": hours,
        "services": [{"name": name, "duration_min": minutes, "aliases": list(aliases),
                      "price": max(5, 5 * round(price * rng.uniform(0.75, 1.35) / 5))}
                     for name, minutes, price, aliases in services],
    }
    return parse_profile(data, "<made-up business>"), kind


def unknown_services(profile: Profile) -> list[str]:
    """What callers may ask a made-up business for that it does not offer: the salon's list and other kinds'
    services, less its own (training only: the salon's held-out ones are left out)."""
    others = [name for kind in KINDS for name, *_ in kind.services]
    salon = phrases.split_items(phrases.UNKNOWN_SERVICES, "train")  # the held-out ones stay unseen
    return [w for w in dict.fromkeys(salon + others) if profile.service(w) is None]
