"""Generic phrasings of the moments a coding history is made of, each with several wordings.

A template is filled with `str.format` from a storyline's values (`A` the option adopted, `B`
another, `pro`/`con` their reasons, `path` a file of the project, ...). The question templates
per kind live here too; topic-specific wording lives in topics.py, bugs.py and facts.py.
"""

from __future__ import annotations

ADOPT = {
    "open": ["We need a {noun} for {purpose}. I'm torn between {A} and {B}.",
             "Before we build more on this: what should we use for {purpose}, {A} or {B}?",
             "Let's settle {short} today. The candidates are {A} and {B}.",
             "For {purpose}, is {A} good enough or should we look at {B}?"],
    "compare": ["{A}: {Apro0}, and {Apro1}. The downside is that {Acon0}. {B} would give us this: {Bpro0}; but {Bcon0}.",
                "Both would work. With {A}, {Apro0}; with {B}, {Bpro0}. What tips it for me: {Apro1}, while with {B} {Bcon0}.",
                "Short version: {A} wins on simplicity here ({Apro0}). {B} is stronger in one way ({Bpro0}) but {Bcon0}."],
    "ask_detail": ["What would the setup look like with {A}?", "How would we configure {A}?",
                   "Sketch the {A} setup for me.", "OK, and concretely, how would {A} be set up?"],
    "detail": ["{detail} I'd keep that in {path}.", "{detail}", "Proposed setup: {detail}"],
    "decide": ["OK, let's go with {A} ({version}). {Apro0cap}.", "Decision: {A}, {version}. Main reason: {Apro0}.",
               "Fine, {A} it is ({version}). {B} can wait.", "Let's do {A} ({version}); {Apro1}."],
    "confirm": ["Recorded the decision. I'll wire {A} in {path} and add an ADR.",
                "Done: decision recorded, and I've updated the architecture section of the README.",
                "Noted as accepted. I'll open a PR with the setup this afternoon."],
    "title": ["{A} for {short}", "Use {A} as the {noun}", "{shortcap}: {A}"],
    "text": ["We use {A} ({version}) for {purpose}. Reasons: {Apro0}; {Apro1}. Considered {B}, but {Bcon0}.",
             "{A} ({version}) is the {noun} for {purpose}. {Apro0cap}, and {Apro1}. Trade-off we accept: {Acon0}."],
}

FLOAT = {
    "open": ["{A} is hurting again: {Acon0}. Is it time to look at {B}?",
             "Another incident today because {Acon0}. What would moving to {B} take?",
             "I'm starting to doubt {A} for {short}: {Acon0}."],
    "answer": ["Moving to {B} would give us this: {Bpro0}. Most of the change is in {path}; we could run both side by side for a while.",
               "{B} fixes exactly that ({Bpro0}), but {Bcon0}. I'd estimate a week including the cut-over."],
    "close": ["Let me talk to ops before we decide anything.", "Let's not decide today; write down the trade-offs for me.",
              "Park it. I'll bring it up at the architecture sync."],
}

SWITCH = {
    "open": ["Ops agreed. We're moving {short} from {A} to {B}.", "Decision time on {short}: we switch to {B}.",
             "After the sync: {A} is out, {B} is in for {purpose}."],
    "answer": ["Then {B} ({version}) replaces {A}. I'll mark the old decision as superseded. {detail}",
               "Understood, {B} ({version}) it is. New setup: {detail}"],
    "why": ["Yes. {Bpro0cap} is what we need, and the deal breaker was that {Acon0}.",
            "Right. The reason, for the record: {Acon0}; {B} solves it ({Bpro0}).",
            "Go ahead. We can live with the fact that {Bcon0}."],
    "confirm": ["Recorded: {B} supersedes {A} for {short}. The cut-over plan is in the ADR.",
                "Done, the decision is recorded and the old one points to it."],
    "title": ["Move {short} to {B}", "{B} replaces {A}", "Switch to {B} for {short}"],
    "text": ["{B} ({version}) replaces {A} for {purpose}. Why: {Acon0}, and {Bpro0}. Trade-off: {Bcon0}.",
             "From now on {purpose} uses {B} ({version}) instead of {A}, because {Acon0}. {Bpro0cap}."],
}

REJECT = {
    "open": ["{person} suggested {C} for {short}. Thoughts?", "What about {C} for {purpose}? Someone brought it up in planning.",
             "Should we consider {C} instead of {current}?"],
    "answer": ["{C} would give us this: {Cpro0}. But {Ccon0}, and {Ccon1}.",
               "I'd argue against it: {Ccon0}. The one upside is that {Cpro0}."],
    "close": ["Agreed, let's not. Record it as rejected so it doesn't come up every quarter.",
              "No then. Write it down as rejected with the reasons."],
    "title": ["{C} for {short} (rejected)", "Not adopting {C}", "Rejected: {C} for {short}"],
    "text": ["Rejected: {C} for {purpose}. {Ccon0cap}; {Ccon1}. We stay on {current}.",
             "We considered {C} for {purpose} and decided against it: {Ccon0}, and {Ccon1}."],
}

PROPOSE = {
    "open": ["Proposal: move {short} to {D}. {Dpro0cap}. I want {other} to weigh in before we commit.",
             "I'd like to propose {D} for {purpose}, since {Dpro0}. Not final until {other} has looked."],
    "answer": ["Written up as a proposed decision. Open question: {Dcon0}.",
               "I've recorded it as proposed, not accepted. The main risk to resolve is that {Dcon0}."],
    "followup": ["Any news on the {D} proposal?", "Did {other} ever reply about {D}?"],
    "pending": ["Still waiting on {other}; nothing has been decided.", "No answer yet, so it stays a proposal."],
    "title": ["Proposal: {D} for {short}", "Adopt {D} for {short}?", "Consider {D} as the {noun}"],
    "text": ["Proposal, not yet agreed: use {D} ({version}) for {purpose}. For: {Dpro0}. Against: {Dcon0}. Needs sign-off from {other}.",
             "Proposed: {D} ({version}) for {purpose}. {Dpro0cap}, but {Dcon0}. Waiting for {other}."],
}

MENTION = ["Unrelated: the {current} dashboards look odd today, probably nothing.",
           "FYI I bumped the {current} client library's patch version, no behaviour change.",
           "While we're on {current} for {short}, can you check that the staging config matches production?"]

BUG = {
    "ack": ["Let me look. Does it happen every time or only under load?", "I'll check {file}. When did it start?",
            "Can you paste the stack trace or a request id?"],
    "more": ["Started after Tuesday's release, as far as I can tell.", "Only in production, staging looks fine.",
             "Here's a request id from the logs: req_{rid}."],
    "cause_intro": ["Found it. ", "I think I see it. ", "Root cause: ", ""],
    "thanks": ["Thanks, closing the ticket.", "Great, I'll tell support.", "Nice. Add it to the incident notes."],
    "fix_open": ["Did the fix for the {title} go out?", "Status on the {title}?", "Where are we with the {title}?"],
}

# Question templates by kind. {X} placeholders as above; {month} a month name.
ASK = {
    "status_yes": ["Is {A} confirmed as our {noun}?", "Did we actually sign off on {A} for {short}?",
                   "Has the team agreed on {A} for {purpose}?", "is {A} the official choice for {short}?"],
    "status_still": ["Are we still using {A} for {short}?", "Is {A} still our {noun}?",
                     "do we still run {A} for {purpose}?"],
    "switch_why": ["Why did we move from {A} to {B}?", "What did we use for {short} before {B}, and why did we change?",
                   "What happened to {A} as our {noun}?", "Why was {A} replaced?"],
    "chain": ["What has {short} gone through: which {noun}s have we used, in order?"],
    "period": ["What did we use for {short} in {month}?", "Back in {month}, which {noun} did we use?",
               "which {noun} were we on in {month}?"],
    "proposed": ["Did we approve {D} for {short}?", "Is {D} our {noun} now?", "Have we switched {short} to {D}?",
                 "Is the move to {D} confirmed?"],
    "rejected": ["Are we adopting {C} for {short}?", "Did we go with {C} for {purpose}?", "Is {C} part of the plan for {short}?"],
    "bug_multi": ["What went wrong with the {title}, and what did we change?",
                  "Explain the {title}: cause and fix."],
    "bug_open": ["Is there a fix for the {title} yet?", "Has the {title} been fixed?"],
    "fact_change": ["{ask} And what was it before that?", "{ask} Has that changed since it was first set?"],
}

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
