"""Carrier phrases per intent. Slots: {service} ("a haircut"), {day} ("on Friday"), {time} ("3:30 p.m."), {name}.

Lists are split by position between train and held-out (see phrases.split_items): keep at least 4 items each.
"""

OPENERS = ["", "", "", "Hi.", "Hello.", "Hi there.", "Good morning.", "Hey.", "Good afternoon.", "Hi, yes.",
           "Hello there.", "Hiya."]

# A booking request, by which slots the caller gives up front.
BOOK_WITH_SERVICE = [
    "I'd like to book {service}", "Can I book {service}", "I want to get {service}", "Could I get {service}",
    "I need {service}", "I'd like to make an appointment for {service}", "Can I come in for {service}",
    "I'd like {service}", "Do you have room for {service}", "Can you fit me in for {service}",
    "I want to book {service}", "I was hoping to get {service}", "Could you book me {service}",
    "Can I schedule {service}", "Put me down for {service}", "I'd love to book {service}",
]
BOOK_NO_SERVICE = [
    "I'd like to book an appointment", "Can I make an appointment", "I want to book something",
    "I need an appointment", "Could I book a time", "I'd like to schedule a visit", "Can you book me in",
    "I want to make a booking", "Can I get an appointment", "I'd like to come in", "I need to book a slot",
    "Could you set up an appointment for me",
]
WHEN = ["{day} at {time}", "at {time} {day}", "{day} at {time}", "{day}, at {time}", "for {time} {day}",
        "{day} at {time} if possible", "{day} at about {time}", "{day} at {time} please"]
DAY_ONLY = ["{day}", "{day}", "{day} if you can", "sometime {day}"]
TIME_ONLY = ["at {time}", "at {time}", "for {time}", "at around {time}"]
NAME_FIRST = ["This is {name}.", "My name is {name}.", "It's {name} here.", "This is {name} calling.",
              "{name} here.", "Hi, I'm {name}.", "My name's {name}.", "Yes, this is {name}."]
NAME_LAST = ["My name is {name}.", "It's for {name}.", "The name is {name}.", "Under {name}, please.",
             "I'm {name}.", "Name's {name}.", "It's under {name}.", "You can put it under {name}."]

# Answers to the agent's questions.
ANSWER_SERVICE = ["{service}, please.", "Just {service}.", "I'd like {service}.", "{service}.",
                  "I want {service}.", "Um, {service}.", "Let's do {service}.", "Just {service} please."]
ANSWER_DAY = ["{day}.", "How about {day}?", "{day} would be good.", "Let's do {day}.", "Um, {day}.",
              "{day} works for me.", "Could we do {day}?", "{day}, please."]
ANSWER_TIME = ["{time}.", "At {time}, please.", "{time} works.", "How about {time}?", "Can I do {time}?",
               "Let's say {time}.", "{time} would be great.", "Um, {time}."]
ANSWER_DAY_TIME = ["{day} at {time}.", "How about {day} at {time}?", "{day} at {time} works.",
                   "Let's do {day} at {time}.", "Could we do {day} at {time}?", "Um, {day} at {time}."]
ANSWER_NAME = ["{name}.", "It's {name}.", "My name is {name}.", "{name}, thanks.", "Yeah, it's {name}.",
               "Sure, {name}.", "This is {name}.", "The name's {name}."]
ANSWER_YES_BOOK = ["Yes, please book {service} for {name}.", "Yes please. {service}, the name is {name}.",
                   "Great, book {service} for {name}.", "Yes. It's {name}, for {service}.",
                   "Perfect, {service} please. My name is {name}.", "Sounds good. {service} for {name}."]
ANSWER_ALTERNATIVE = ["Okay, {time} then.", "{time} works.", "Let's do {time} instead.", "Fine, {time}.",
                      "Then {time}, please.", "I'll take {time}.", "Okay, how about {time}?", "{time} is fine."]
ANSWER_OTHER_DAY = ["Okay, {day} then.", "What about {day}?", "Then {day}, please.", "Let's try {day}.",
                    "Okay, {day} instead.", "How about {day} then?", "Fine, {day}.", "{day} then."]

AVAILABILITY_DAY = ["Do you have anything free {day}?", "What times are open {day}?", "Any openings {day}?",
                    "Is there availability {day}?", "When are you free {day}?", "What do you have {day}?",
                    "Do you have any openings {day}?", "Are there any slots left {day}?",
                    "How busy are you {day}?", "What's available {day}?", "Can I get in {day}?",
                    "Is anything open {day}?"]
AVAILABILITY_TIME = ["Are you free {day} at {time}?", "Is {time} {day} available?", "Do you have {time} {day}?",
                     "Is there an opening {day} at {time}?", "Can you do {time} {day}?",
                     "Is {day} at {time} free?", "Would {time} {day} work?", "Anything at {time} {day}?",
                     "Is {time} open {day}?", "Do you have a slot at {time} {day}?", "Could I come {day} at {time}?",
                     "Is {day} at {time} taken?"]

CANCEL = ["I need to cancel my appointment.", "Can I cancel my booking?", "I'd like to cancel my appointment.",
          "I have to cancel.", "Please cancel my appointment.", "I can't make it, can you cancel it?",
          "I want to cancel my booking.", "Could you cancel my appointment?", "Cancel my appointment, please.",
          "I won't be able to come, please cancel.", "I need to call off my appointment.",
          "Something came up, I have to cancel."]
CANCEL_DAY = ["I need to cancel my appointment {day}.", "Can I cancel my booking {day}?",
              "Please cancel my appointment {day}.", "I can't make it {day}.",
              "I'd like to cancel {day}.", "Cancel my appointment {day}, please.",
              "I won't make it {day}, please cancel.", "Could you cancel the one {day}?"]
WHICH_DAY = ["The one {day}.", "{day}.", "Cancel the {day} one.", "The appointment {day}.",
             "Um, {day}.", "The {day} one, please.", "{day}, please.", "Just the one {day}."]
LIST = ["When is my appointment?", "Do I have an appointment booked?", "Can you check my booking?",
        "What time is my appointment?", "Can you tell me when my appointment is?", "Am I booked in?",
        "I forgot when my appointment is.", "Could you look up my appointment?", "Do I have anything booked?",
        "Can you check if I have an appointment?", "When am I coming in?", "What appointments do I have?"]

HOURS = ["What are your hours?", "When are you open?", "What are your opening hours?", "What time do you open?",
         "How late are you open?", "What are your hours this week?", "When do you close?", "Are you open?",
         "What time do you close?", "What are your business hours?", "When can I come in?",
         "What hours are you open?"]
HOURS_DAY = ["What are your hours {day}?", "Are you open {day}?", "What time do you close {day}?",
             "When do you open {day}?", "How late are you open {day}?", "Are you guys open {day}?",
             "What time are you open {day}?", "When are you open {day}?", "Do you open {day}?",
             "What are the hours {day}?", "Until when are you open {day}?", "Are you working {day}?"]
ADDRESS = ["Where are you located?", "What's your address?", "Where is the salon?", "How do I find you?",
           "What's the address?", "Where's your shop?", "Can you give me your address?", "Where are you guys?"]
PHONE = ["What's your phone number?", "What number can I call?", "Can I get your phone number?",
         "What's the number there?", "How can I call you back?", "Do you have a phone number?",
         "What's the best number to reach you?", "Can you give me your number?"]
SERVICES = ["What services do you offer?", "What do you do there?", "What can I book?",
            "What kind of services do you have?", "What do you offer?", "Which services are available?",
            "What treatments do you do?", "What can you do for me?"]
PRICE_ONE = ["How much is {service}?", "What do you charge for {service}?", "How much does {service} cost?",
             "What's the price of {service}?", "How much would {service} be?", "What does {service} cost?",
             "How much for {service}?", "What's the price for {service}?"]
# "do you do X?" (not "do you have": that is how callers ask for free times)
SERVICE_ASK = ["Do you do {service}?", "Do you offer {service}?", "Is {service} something you offer?",
               "Do you guys do {service}?", "Is {service} something you do?", "Do you provide {service}?",
               "Do you guys offer {service}?", "Does your place do {service}?"]
# A follow-up that asks the last question again about another service or day ("and a blow dry?").
FOLLOW_UP = ["And {thing}?", "What about {thing}?", "How about {thing}?", "Okay, and {thing}?",
             "And what about {thing}?", "Okay. What about {thing}?", "And {thing}, please?", "Same for {thing}?"]
# A question after the hours of a day, about that day (Style.call_turns): the same call again.
HOURS_FOLLOW_UP = ["How late does that go?", "What time do you close then?", "And when do you open?",
                   "So you close at what time?", "How late are you open that day?",
                   "And what time do you open that day?", "Open till when that day?", "When do you shut that day?",
                   "Okay, and closing time?", "So what time's closing?"]
# Someone else in the call wants a booking too (Style.call_turns). {who}, {them}: one of WHO.
WHO = {"my wife": "her", "my husband": "him", "my son": "him", "my daughter": "her", "my friend": "them",
       "my sister": "her", "my brother": "him", "my mom": "her", "my dad": "him", "my partner": "them",
       "my kid": "them", "my roommate": "them", "my girlfriend": "her", "my boyfriend": "him",
       "my cousin": "them", "my aunt": "her"}  # who, and how the caller then says them
SECOND_SAME = ["Can you book {who} as well? Same time, it's {name}.", "Oh, and {who} too, at that time, {name}.",
               "Could I get the same for {who}? {name}.", "One more for {who}, {name}, at that same slot.",
               "Same again for {who} please, the name is {name}.", "{who} would like that time too, {name}.",
               "Also {who}, {name}, at the same slot if you can.", "Book {who} in too, same slot, under {name}."]
SECOND_TIME = ["Could you add {who} at {time}? {name}.", "Can you also book {who} at {time}? It's {name}.",
               "And {who} at {time}, please. {name}.", "Then {who} at {time}, under {name}.",
               "Also a slot at {time} for {who}, {name}.", "And {service} for {who} at {time}, {name}.",
               "Can I also get {service} at {time} for {who}? The name is {name}.",
               "Plus {service} for {who}, {name}, at {time}."]
SECOND_NO_NAME = ["Can you book {who} too, at that time?", "Could I get the same for {who}?",
                  "One more at that time for {who}.", "Oh, {who} needs one as well. Same slot?",
                  "Can {who} come in at that time too?", "Put {who} down for that too."]
ALTERNATIVE_FOR = ["{time} for {them} instead.", "Fine, put {them} at {time}.", "{time} for {them} is fine.",
                   "Let's do {time} for {them}.", "Book {them} at {time} then.", "Okay, {them} at {time}."]
# Which of the appointments just listed to cancel (Style.call_turns). {day}: a weekday; {other}: another one.
CANCEL_ONE = ["Cancel {day}, but keep {other}.", "Can you cancel the one on {day}? I'll keep {other}.",
              "I can't make {day}, can you cancel that one?", "Just cancel {day}, {other} is fine.",
              "Drop {day} and leave {other} as it is.", "I'll keep {other}. Cancel {day} for me.",
              "Actually, drop the {day} appointment.", "Take {day} off, I still want {other}.",
              "Remove my {day} appointment, {other} stays.", "{other} is good, but {day} has to go."]
CANCEL_IT = ["Okay, can you cancel it?", "Actually, cancel it please.", "Go ahead and call it off.",
             "Can you cancel that for me?", "Please cancel it.", "Okay, take it off the books.",
             "Hmm, go ahead and cancel it.", "Then I'd like it cancelled."]
# The date tomorrow (Style.call_turns): the date tool's result names it.
DATE_TOMORROW = ["And what's the date tomorrow?", "What's tomorrow's date?", "What date is it tomorrow?",
                 "What's the date going to be tomorrow?", "Sorry, what's tomorrow, date-wise?",
                 "And tomorrow's date is?", "Do you know tomorrow's date?", "What date will it be tomorrow?"]
PRICE_ALL = ["What are your prices?", "How much do you charge?", "Can you tell me your prices?",
             "What do your services cost?", "Do you have a price list?", "How expensive are you?",
             "What are the prices like?", "What do you charge?"]
DATETIME = ["What's the date today?", "What time is it?", "What day is it today?", "What's today's date?",
            "Can you tell me the time?", "What's the time now?", "What day is it?", "Do you know what time it is?"]
TRANSFER = ["Can I talk to a real person?", "Let me speak to someone.", "I want to talk to a human.",
            "Can you put me through to the front desk?", "Operator, please.", "Can I speak to a stylist?",
            "Transfer me to a person, please.", "I'd rather talk to someone.", "Is there a person I can talk to?",
            "Get me a human please.", "Can I speak with the manager?", "Connect me to a real person."]

COMPLIMENT = ["I just wanted to say my haircut last week was great.", "The stylist did an amazing job last time.",
              "I love how my color turned out, thank you.", "You guys did a great job on my hair.",
              "I just called to say thank you for the great service.", "My daughter loved her haircut.",
              "Your place is the best, honestly.", "I got so many compliments on my hair."]
GREETING = ["Hello.", "Hi.", "Hey there.", "Good morning.", "Hi there.", "Hello?", "Good afternoon.",
            "Hey.", "Good evening.", "Hi, hello.", "Hello, hi.", "Yes, hello."]
HOW_ARE_YOU = ["How are you?", "How are you doing?", "How's it going?", "How are you today?",
               "Hi, how are you?", "How's your day going?", "Hello, how are you doing?", "How have you been?"]
THANKS = ["Thanks.", "Thank you.", "Thank you so much.", "Great, thanks.", "Perfect, thank you.",
          "Thanks a lot.", "Okay, thanks.", "Awesome, thank you.", "Cheers.", "Thanks for your help.",
          "That's great, thanks.", "Wonderful, thank you."]
WHO_ARE_YOU = ["Who are you?", "Are you a robot?", "Am I talking to a real person?", "What are you?",
               "Is this a machine?", "Who am I speaking with?", "What can you do?", "Are you human?",
               "What can you help me with?", "Is this an automated system?", "Who is this?",
               "Are you an AI?"]
GOODBYE = ["Goodbye.", "Bye.", "That's all, bye.", "Okay, bye bye.", "No, that's it. Goodbye.",
           "Thanks, bye.", "That's everything, goodbye.", "See you, bye.", "Nope, that's all. Bye.",
           "Alright, have a good day. Bye.", "I'm done, thanks. Bye.", "No thanks, goodbye."]
OUT_OF_SCOPE = ["Can you order me a pizza?", "What's the weather like?", "Can you book me a flight?",
                "Who won the game last night?", "Can you help me with my taxes?", "Tell me a joke.",
                "What's the capital of France?", "Can you recommend a restaurant?", "Do you sell shampoo online?",
                "Can you call me a taxi?", "What's the news today?", "Can you fix my computer?",
                "What's a good movie to watch?", "Can you do my homework?", "What stocks should I buy?",
                "Can you play some music?"]
