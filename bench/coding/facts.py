"""Hand-written single facts told in passing (versions, limits, owners, conventions), some of them
changed later, and the files a project's notes describe.

A fact has per-project values (`values`, one picked per project, the second one used when the
fact is revised), the sentence a developer says (`say`) and the one that revises it (`revise`).
"""

from __future__ import annotations

FACTS: list[dict] = [
    {"key": "runtime", "values": {"python": ["Python 3.11.9", "Python 3.12.4"], "ts": ["Node 18.19", "Node 20.12"],
                                  "go": ["Go 1.21.8", "Go 1.22.3"]},
     "say": ["The Dockerfile builds on {v} slim; don't use newer syntax than that yet.",
             "Heads-up: production runs {v}, so keep the code compatible with it."],
     "revise": ["Bumped the base image from {old} to {v}; CI and production are both on it now."],
     "asks": ["Which runtime version does production run?", "what language version is the Docker image on?"],
     "paraphrases": ["Which interpreter release executes our code in the live environment?"]},
    {"key": "rate-limit", "values": {"any": ["100 requests per second per API key", "250 requests per second per API key"]},
     "say": ["The public API allows {v}; above that clients get 429 with a Retry-After header."],
     "revise": ["We raised the API limit from {old} to {v} for everyone after the capacity work."],
     "asks": ["What is the API rate limit per key?", "how many requests per second can a client make?"],
     "paraphrases": ["How hard may one integrator hammer us before getting throttled?"]},
    {"key": "slo", "values": {"any": ["99.9% availability over 30 days with p99 under 300 ms",
                                      "99.95% availability over 30 days with p99 under 250 ms"]},
     "say": ["Our SLO is {v}; the error budget alert fires at 50% burn."],
     "revise": ["New SLO agreed with product: {v} (it was {old})."],
     "asks": ["What is the service's SLO?", "what availability target do we commit to?"],
     "paraphrases": ["How reliable and quick have we promised to be, in numbers?"]},
    {"key": "coverage", "values": {"any": ["80%", "90%"]},
     "say": ["CI fails the build if line coverage drops below {v}."],
     "revise": ["Raised the coverage gate from {old} to {v} now that the legacy module is gone."],
     "asks": ["What coverage threshold does CI enforce?", "how much test coverage do we require?"],
     "paraphrases": ["Below what share of exercised lines does the pipeline refuse a change?"]},
    {"key": "retention", "values": {"any": ["90 days", "30 days"]},
     "say": ["We keep raw webhook payloads for {v}, then a job deletes them (GDPR review asked for a limit)."],
     "revise": ["Legal asked us to cut payload retention from {old} to {v}; the purge job is updated."],
     "asks": ["How long do we keep raw webhook payloads?", "what's the retention for stored payloads?"],
     "paraphrases": ["After how long is the original body of a partner's callback erased?"]},
    {"key": "owner", "values": {"any": ["Priya", "Tomás", "Lena", "Kwame"]},
     "say": ["{v} owns the reconciliation job; page her or him before touching it.",
             "Ask {v} about reconciliation, that job is theirs."],
     "revise": ["Reconciliation moves from {old} to {v} starting next sprint."],
     "asks": ["Who owns the reconciliation job?", "who should I ask about reconciliation?"],
     "paraphrases": ["Which teammate is responsible for the nightly matching of our records against the bank's?"]},
    {"key": "release-days", "values": {"any": ["Tuesdays and Thursdays", "every weekday before 15:00"]},
     "say": ["We release on {v}; nothing goes out on Fridays."],
     "revise": ["Release train changes: from {old} to {v}."],
     "asks": ["When do we release?", "which days do releases go out?"],
     "paraphrases": ["On what schedule does new code reach customers?"]},
    {"key": "staging", "values": {"any": ["staging.{service}.internal", "{service}.stg.acme.dev"]},
     "say": ["Staging is at https://{v}; it has anonymised production data from last Sunday."],
     "revise": ["Staging moved from {old} to https://{v}."],
     "asks": ["What's the staging URL?", "where does staging live?"],
     "paraphrases": ["Which address hosts the pre-production copy for testing?"]},
    {"key": "api-version", "values": {"any": ["2023-10-16", "2024-06-20"]},
     "say": ["We pin the processor's API version to {v} in the client; upgrading changes the webhook payloads."],
     "revise": ["Upgraded the processor API version from {old} to {v} after testing the new payloads."],
     "asks": ["Which processor API version are we pinned to?", "what API version does the processor client send?"],
     "paraphrases": ["Which dated revision of the card company's interface do we request?"]},
    {"key": "review-rule", "values": {"any": ["two approvals for anything under migrations/", "an approval from a code owner"]},
     "say": ["Branch protection: merges need {v}."],
     "revise": ["Changed branch protection from {old} to {v}."],
     "asks": ["What approvals does a merge need?", "what's the review rule for merging?"],
     "paraphrases": ["How many colleagues must sign off before a change can land?"]},
    {"key": "upload-limit", "values": {"any": ["10 MB", "25 MB"]},
     "say": ["Uploads are capped at {v} at the load balancer; bigger files get 413."],
     "revise": ["Raised the upload cap from {old} to {v} for the bulk import feature."],
     "asks": ["What's the maximum upload size?", "how large can an uploaded file be?"],
     "paraphrases": ["Beyond what file weight does the front door refuse attachments?"]},
    {"key": "incident-channel", "values": {"any": ["#inc-{service}", "#payments-incidents"]},
     "say": ["Incidents go to {v} on Slack; open it with /incident so the timeline is kept."],
     "revise": ["Incident channel renamed from {old} to {v}."],
     "asks": ["Which Slack channel is for incidents?", "where do we declare incidents?"],
     "paraphrases": ["When production is on fire, where do people gather to coordinate?"]},
    {"key": "ports", "values": {"any": ["8080 for the API and 9102 for metrics", "8000 for the API and 9090 for metrics"]},
     "say": ["The container listens on {v}."],
     "revise": ["Port change in the chart: now {v} (was {old})."],
     "asks": ["Which ports does the container listen on?", "what port is the metrics endpoint on?"],
     "paraphrases": ["On which numbered sockets does the process accept traffic and expose its counters?"]},
]

# File notes, by role. Paths per stack; the text says what the file does and what to watch for.
AREAS: dict[str, dict] = {
    "handlers": {"path": {"python": "app/api/{domains}.py", "ts": "src/routes/{domains}.ts", "go": "internal/http/{domains}.go"},
                 "note": "HTTP handlers for /v1/{domains}: create, get, list and refund. Validation happens in the "
                         "request models; handlers never talk to the processor directly, they call the service layer.",
                 "ask": "Where are the /v1/{domains} HTTP handlers?"},
    "billing": {"path": {"python": "app/billing/invoices.py", "ts": "src/billing/invoices.ts", "go": "internal/billing/invoices.go"},
                "note": "Builds invoices from usage records: groups lines per billing period, applies tax per "
                        "jurisdiction and renders the PDF through the template service.",
                "ask": "Which file builds invoices from usage records?"},
    "webhooks": {"path": {"python": "app/webhooks/processor.py", "ts": "src/webhooks/processor.ts", "go": "internal/webhooks/processor.go"},
                 "note": "Receives processor webhooks: verifies the signature on the raw body, deduplicates by event id "
                         "and dispatches to a handler per event type. Unknown event types are acknowledged and logged.",
                 "ask": "Where do we verify incoming webhook signatures?"},
    "db": {"path": {"python": "app/db/session.py", "ts": "src/db/client.ts", "go": "internal/db/pool.go"},
           "note": "Creates the connection pool and the per-request session; reads may go to the replica unless the "
                   "request wrote recently. Pool sizes come from settings.",
           "ask": "Where is the database connection pool created?"},
    "worker": {"path": {"python": "app/worker/main.py", "ts": "src/worker/index.ts", "go": "cmd/worker/main.go"},
               "note": "Entry point of the background worker: registers job handlers, sets up graceful shutdown on "
                       "SIGTERM and exposes a liveness probe on /healthz.",
               "ask": "What is the worker's entry point?"},
    "scheduler": {"path": {"python": "app/worker/schedule.py", "ts": "src/worker/schedule.ts", "go": "internal/jobs/schedule.go"},
                  "note": "Periodic jobs: reconciliation nightly, payout batching hourly, the webhook payload purge "
                          "daily. Times are in UTC.",
                  "ask": "Where are the periodic jobs scheduled?"},
    "cache": {"path": {"python": "app/cache.py", "ts": "src/lib/cache.ts", "go": "internal/cache/cache.go"},
              "note": "Read-through cache helpers: `cached(key, ttl)` wraps a loader; keys carry a schema version so "
                      "a deploy that changes a shape can bump it.",
              "ask": "Where is the read-through cache helper?"},
    "exports": {"path": {"python": "app/exports/csv.py", "ts": "src/exports/csv.ts", "go": "internal/exports/csv.go"},
                "note": "CSV exports for the dashboard: streams rows in pages of 1,000 and writes the header row from "
                        "the column registry.",
                "ask": "Which module writes the CSV exports?"},
    "auth": {"path": {"python": "app/auth/tokens.py", "ts": "src/auth/tokens.ts", "go": "internal/auth/tokens.go"},
             "note": "Issues and validates API tokens; the signing keys are loaded from the secrets store at start-up "
                     "and rotated by a scheduled job.",
             "ask": "Where are API tokens issued and validated?"},
    "client": {"path": {"python": "app/clients/processor.py", "ts": "src/clients/processor.ts", "go": "internal/processor/client.go"},
               "note": "The card processor client: one shared HTTP client, idempotency keys on every mutating call, and "
                       "error mapping from processor codes to our error types.",
               "ask": "Where is the card processor client?"},
    "tests": {"path": {"python": "tests/api/test_{domains}.py", "ts": "test/{domains}.test.ts", "go": "internal/http/{domains}_test.go"},
              "note": "API tests for /v1/{domains}; fixtures create merchants through the public API rather than the "
                      "database so the tests exercise validation.",
              "ask": "Where are the API tests for /v1/{domains}?"},
    "settings": {"path": {"python": "app/settings.py", "ts": "src/config.ts", "go": "internal/config/config.go"},
                 "note": "Reads configuration from the environment once at start-up into a frozen settings object; "
                         "unknown variables starting with the app prefix are an error.",
                 "ask": "Where is configuration read from the environment?"},
}

# Conversations with nothing to do with a project's facts (what fills real histories), some of
# them sharing words with the facts: the distractors.
DISTRACTORS: list[list[tuple[str, str]]] = [
    [("user", "How do I squash the last four commits before pushing?"),
     ("assistant", "`git rebase -i HEAD~4`, mark all but the first as `squash` (or `fixup` to drop their messages), "
                   "save, then `git push --force-with-lease` since the branch history changed.")],
    [("user", "Can you write a regex that matches ISO dates like 2024-03-05?"),
     ("assistant", r"`^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$`. It does not check month lengths; parse the "
                   "string with a date library if you need that.")],
    [("user", "My laptop's Docker says no space left on device."),
     ("assistant", "Run `docker system df` to see what is using space, then `docker system prune -a --volumes` if "
                   "you do not need the old images and volumes. The VM disk size is in Docker Desktop's settings.")],
    [("user", "I'm off from Monday to Wednesday next week, can you remind me to hand over the review queue?"),
     ("assistant", "I can't set reminders, but here is a handover note you can paste: open reviews, who is covering, "
                   "and anything waiting on you.")],
    [("user", "What's a good name for a function that returns the merchants whose trial ends this week?"),
     ("assistant", "`merchants_with_trial_ending_this_week()` is long but unambiguous; `trials_ending_soon()` if the "
                   "window is a parameter.")],
    [("user", "Explain the difference between a process and a thread in two sentences, for the onboarding doc."),
     ("assistant", "A process has its own memory space and resources; threads live inside a process and share its "
                   "memory. Threads are cheaper to create but need synchronisation when they touch shared data.")],
    [("user", "Lunch order for the offsite: 6 vegetarian, 4 vegan, 8 anything. Draft the message to the caterer?"),
     ("assistant", "Hi! For Thursday's offsite we'd like lunch for 18: 6 vegetarian, 4 vegan and 8 without "
                   "restrictions. Delivery at 12:15 to the 4th floor. Thanks!")],
    [("user", "How do I make vim stop auto-indenting when I paste?"),
     ("assistant", "`:set paste` before pasting and `:set nopaste` after, or use a terminal that supports bracketed "
                   "paste (recent vim handles it automatically).")],
    [("user", "Write a short PR description for the change that renames `amount` to `amount_minor` in the serializer."),
     ("assistant", "Renames `amount` to `amount_minor` in the API serializer to make the unit explicit. The old field "
                   "stays as a deprecated alias for one release. No database change.")],
    [("user", "What does `SELECT ... FOR UPDATE SKIP LOCKED` do?"),
     ("assistant", "It locks the selected rows and silently skips rows another transaction already locked: the usual "
                   "way to let several workers take jobs from one table without blocking each other.")],
    [("user", "I keep getting `ModuleNotFoundError` in my notebook even though pip installed the package."),
     ("assistant", "The notebook kernel is probably a different interpreter. Run `import sys; sys.executable` in the "
                   "notebook and install with `that-python -m pip install ...`.")],
    [("user", "Summarise the talk on property-based testing I went to: hypothesis found a bug in their date parser."),
     ("assistant", "Property-based testing generates inputs from a description of valid data and checks invariants; "
                   "the speaker's date parser failed on leap days, which no hand-written example covered.")],
    [("user", "Can you convert this curl to Python? curl -H 'Accept: application/json' https://example.com/status"),
     ("assistant", "`httpx.get('https://example.com/status', headers={'Accept': 'application/json'}).json()` (or the "
                   "same with requests).")],
    [("user", "Which is faster for membership tests, a list or a set?"),
     ("assistant", "A set: membership is O(1) on average against O(n) for a list. For a handful of items the "
                   "difference does not matter.")],
    [("user", "The coffee machine on 3 is broken again, who do I tell?"),
     ("assistant", "Facilities handles that; the office channel usually knows who is on it this week.")],
    [("user", "Help me word a polite reply declining the vendor demo next week."),
     ("assistant", "Thanks for reaching out. We're not evaluating tools in this area right now, so I'll pass on the "
                   "demo; I'll get in touch if that changes.")],
    [("user", "How do I find which process is listening on port 5432 on my Mac?"),
     ("assistant", "`lsof -nP -iTCP:5432 -sTCP:LISTEN` shows the process and its pid.")],
    [("user", "What's the difference between `git merge --no-ff` and a regular merge?"),
     ("assistant", "`--no-ff` always creates a merge commit, even when the branch could be fast-forwarded, so the "
                   "branch's existence stays visible in history.")],
    [("user", "Give me three interview questions for a backend candidate about concurrency."),
     ("assistant", "1. How would you make a counter safe to increment from many threads? 2. What is a deadlock and how "
                   "do you avoid one? 3. When would you choose async IO over threads?")],
    [("user", "Can you explain what a bloom filter is, quickly?"),
     ("assistant", "A compact bit array with several hash functions: it can say an item is definitely absent or "
                   "probably present. No false negatives, tunable false positives.")],
    [("user", "I need a cron expression for 'every weekday at 7:45'."),
     ("assistant", "`45 7 * * 1-5`.")],
    [("user", "Why does my Makefile say 'missing separator'?"),
     ("assistant", "Recipe lines must start with a tab, not spaces. Your editor probably converted the tab; `cat -A "
                   "Makefile` shows `^I` for real tabs.")],
    [("user", "Draft a message to the team: the sprint demo moves to Friday 11:00."),
     ("assistant", "Quick note: this sprint's demo moves to Friday at 11:00, same room and link. Bring whatever you "
                   "want to show!")],
    [("user", "What's the idiomatic way to read a file line by line?"),
     ("assistant", "In Python, `for line in open(path):` inside a `with` block; in Go, a `bufio.Scanner`; in Node, "
                   "`readline.createInterface` over a stream.")],
    [("user", "Is it worth learning Rust this year? Thinking about side projects."),
     ("assistant", "If you enjoy systems work, yes: the ownership model changes how you think about memory even in "
                   "other languages. Pick a small CLI tool as the first project.")],
    [("user", "My tests pass alone but fail together. Where do I start?"),
     ("assistant", "Look for shared state: module-level globals, a database not reset between tests, time or "
                   "randomness. Run with random ordering to find the pair that interferes.")],
    [("user", "Quick one: how do I pretty-print JSON in the terminal?"),
     ("assistant", "`jq .` or `python -m json.tool`.")],
    [("user", "The standup is moving to 9:45 from next week, just so you know."),
     ("assistant", "Noted. Anything you want prepared before standups?")],
    [("user", "Can you explain what a covering index is?"),
     ("assistant", "An index that contains every column a query needs, so the database answers from the index alone "
                   "without visiting the table rows. In Postgres that is an index with INCLUDE columns.")],
    [("user", "What's the keyboard shortcut to jump to a symbol in VS Code?"),
     ("assistant", "Ctrl+Shift+O (Cmd+Shift+O on a Mac) for symbols in the file, Ctrl+T for the whole workspace.")],
    [("user", "Write a haiku about on-call for the team channel."),
     ("assistant", "Pager hums at three / dashboards glow in the dark room / it was DNS again")],
    [("user", "How do I undo the last commit but keep the changes?"),
     ("assistant", "`git reset --soft HEAD~1` keeps the changes staged; `git reset HEAD~1` keeps them unstaged.")],
    [("user", "What's the difference between a mutex and a semaphore?"),
     ("assistant", "A mutex lets one holder in at a time and is released by its owner; a semaphore counts permits, so "
                   "N holders can be inside, and any thread may release a permit.")],
    [("user", "Recommend a book on distributed systems for a junior engineer."),
     ("assistant", "Designing Data-Intensive Applications by Martin Kleppmann: practical, broad, and readable "
                   "without a background in theory.")],
    [("user", "Our team offsite is in Lisbon, any tips for a half-day activity?"),
     ("assistant", "A walking tour of Alfama ending at a miradouro is easy to organise for a group, or a tram 28 ride "
                   "and a pastel de nata stop in Belém.")],
    [("user", "How do I time a block of code quickly in Python?"),
     ("assistant", "`time.perf_counter()` before and after, or `python -m timeit` for small snippets; for whole "
                   "programs, a profiler like py-spy shows where the time goes.")],
    [("user", "Convert 1712345678 from a Unix timestamp to a date."),
     ("assistant", "2024-04-05 19:34:38 UTC.")],
    [("user", "I'll be at the dentist from 2 to 3, ping me if the deploy needs me."),
     ("assistant", "Understood. I can't ping you, but I'll leave a summary of anything that comes up here.")],
]

# Things people mention in passing about options they did not choose: near-duplicates of the
# evidence inside the same project.
HEARSAY = ["A friend at another company says {option} was a pain for them: {con}.",
           "I read a post where a team moved off {option} because {con}.",
           "At my previous job we ran {option}; honestly {pro}.",
           "Random thought, not for now: {option} might be worth a look one day, since {pro}."]
