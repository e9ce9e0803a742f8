"""The front desk's tools as the models see them: each tool's JSON schema, with the arguments the caller must have
said (`SAID`: app.agent.said checks them, for every tool) and those the embedded model's prompt leaves out
(`UNLISTED`). app.agent.tools runs them.
"""
from app.agent.days import DAYS
from app.agent.said import CLOCK_PATTERN, SAID

TOPICS = ("hours", "address", "phone", "services", "prices")

# SAID: an argument the caller must have said (app.agent.said checks it against the conversation, for every tool)
_SAID = {"type": "string", SAID: True}
# An argument the embedded model's prompt leaves out of its tool's line (app.agent.prompt): the adapter was trained
# on the tools without it. The reply grammar still holds a call to it when the caller says a value it takes
# (app.agent.held): a cancellation's time, the day whose date is asked. Listed, it moved the model's choice on
# held-out turns near a boundary ("What can you do for me?" got the prices, not the services; "Connect, connect me
# to a real person." no transfer).
UNLISTED = "x-unlisted"
SCHEMAS = [
    {"name": "business_info", "description": "Opening hours, address, phone, services or prices of the business.",
     "parameters": {"type": "object", "properties": {
         "topic": {"type": "string", "enum": list(TOPICS)},
         "day": {"type": "string", "enum": list(DAYS), "description": "for hours on one day", SAID: True},
         "service": {"type": "string", "description": "for the price of one service", SAID: True}},
         "required": ["topic"]}},
    {"name": "check_availability", "description": "Free times on a day, or whether one time is free.",
     "parameters": {"type": "object", "properties": {
         "day": {"type": "string", "enum": list(DAYS), SAID: True},
         "time": {"type": "string", "description": "HH:MM, 24-hour clock", "pattern": CLOCK_PATTERN, SAID: True}}, "required": ["day"]}},
    {"name": "book_appointment", "description": "Book a service for a named caller at a day and time.",
     "parameters": {"type": "object", "properties": {
         "name": _SAID, "day": {"type": "string", "enum": list(DAYS), SAID: True},
         "time": {"type": "string", "description": "HH:MM, 24-hour clock", "pattern": CLOCK_PATTERN, SAID: True}, "service": _SAID},
         "required": ["service", "day", "time", "name"]}},  # the order the agent asks for them
    {"name": "cancel_appointment",
     "description": "Cancel the caller's upcoming appointment (on a day, at a time, if several).",
     "parameters": {"type": "object", "properties": {
         "name": _SAID, "day": {"type": "string", "enum": list(DAYS), SAID: True},
         "time": {"type": "string", "description": "HH:MM, 24-hour clock", "pattern": CLOCK_PATTERN, SAID: True,
                  UNLISTED: True}},
         "required": ["name"]}},
    {"name": "list_appointments", "description": "The caller's upcoming appointments.",
     "parameters": {"type": "object", "properties": {"name": _SAID}, "required": ["name"]}},
    {"name": "current_datetime", "description": "Today's date and the time now at the business, or another day's date.",
     "parameters": {"type": "object", "properties": {
         "day": {"type": "string", "enum": [d for d in DAYS if d != "today"], "description": "whose date is asked",
                 SAID: True, UNLISTED: True}}}},
    {"name": "transfer_to_human", "description": "Hand the call to a person on the staff.",
     "parameters": {"type": "object", "properties": {}}},
    {"name": "end_call", "description": "Hang up after saying goodbye.",
     "parameters": {"type": "object", "properties": {}}},
]
