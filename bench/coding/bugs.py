"""Hand-written bugs: a symptom reported in one session, its cause found and its fix made later.

`report` is what the developer first sees (an error, a wrong number); `cause` the finding;
`fix` the change, with the pull request number filled in by the generator. Files are named by
role (`area`) and resolved to the project's own paths. `asks` name the symptom; `paraphrases`
describe it without its words.
"""

from __future__ import annotations

BUGS: list[dict] = [
    {
        "key": "double-charge", "area": "handlers", "title": "duplicate charges on retried requests",
        "report": "We charged a customer twice for the same {domain} yesterday. The client retried POST /v1/{domains} "
                  "after a timeout and both requests went through.",
        "cause": "Both requests passed the existence check before either committed: the check-then-insert in {file} "
                 "is not atomic, so two concurrent retries each created a row.",
        "fix": "Fixed in PR #{pr}: an Idempotency-Key header is now required on POST /v1/{domains}; the key is stored "
               "with a unique index on (merchant_id, key) and a replay returns the first response.",
        "asks": ["Why were customers charged twice?",
                 "What was the fix for the duplicate charge bug?"],
        "paraphrases": ["A shopper paid two times after their phone resent the order; what was behind that and how did we stop it?"],
    },
    {
        "key": "timezone-period", "area": "billing", "title": "billing period off by one day",
        "report": "Invoices for merchants in Australia show the period ending on the 30th instead of the 31st. "
                  "Only customers east of UTC are affected.",
        "cause": "{file} computes the period end as midnight UTC and then formats it in the merchant's zone, so for "
                 "UTC+10 the boundary lands on the previous day.",
        "fix": "PR #{pr} computes period boundaries in the merchant's time zone first and converts to UTC only for "
               "storage; a regression test covers Australia/Sydney and Pacific/Auckland.",
        "asks": ["What caused invoices to show the wrong period end for Australian merchants?",
                 "How did we fix the off-by-one-day period bug?"],
        "paraphrases": ["Why did statements for clients in Sydney close a day early, and what corrected it?"],
    },
    {
        "key": "webhook-signature", "area": "webhooks", "title": "webhook signature verification failing",
        "report": "Since this morning every incoming processor webhook fails with `SignatureVerificationError: no "
                  "signatures found matching the expected signature for payload`.",
        "cause": "The new body-parsing middleware decodes and re-serialises JSON before {file} sees it, so the bytes "
                 "we verify are not the bytes the processor signed.",
        "fix": "PR #{pr} reads the raw request body for the webhook route only and verifies the signature before any "
               "parsing; the middleware now skips /webhooks/*.",
        "asks": ["Why did webhook signature verification start failing?",
                 "What fixed the SignatureVerificationError on incoming webhooks?"],
        "paraphrases": ["Calls from the card processor were all being refused as forged; why, and what was changed?"],
    },
    {
        "key": "pool-exhaustion", "area": "db", "title": "database connection pool exhausted under load",
        "report": "During the load test p99 latency jumped to 30 s and the logs are full of `QueuePool limit of size 10 "
                  "overflow 5 reached, connection timed out`.",
        "cause": "The export endpoint in {file} holds a connection open while it streams the CSV to the client, so "
                 "twenty slow downloads pin the whole pool.",
        "fix": "PR #{pr} reads the export into a temporary file inside a short transaction and streams the file "
               "afterwards; the pool is now size 20 with overflow 10.",
        "asks": ["What exhausted the connection pool during the load test?",
                 "How did we fix the QueuePool limit errors?"],
        "paraphrases": ["Why did everything slow to a crawl when many people downloaded reports at once, and what changed?"],
    },
    {
        "key": "float-rounding", "area": "billing", "title": "totals off by a cent",
        "report": "Finance found 214 invoices whose total is one cent lower than the sum of their lines.",
        "cause": "{file} sums line amounts as floats and truncates with int() instead of rounding, so 19.99 * 3 "
                 "becomes 59.96.",
        "fix": "PR #{pr} sums integer minor units and applies banker's rounding only to the tax line; a backfill "
               "script corrected the 214 invoices.",
        "asks": ["Why were some invoice totals one cent low?", "What did we do about the invoices that were a cent off?"],
        "paraphrases": ["Accounting spotted statements that came up a penny short; where did the penny go?"],
    },
    {
        "key": "memory-leak", "area": "worker", "title": "worker memory growing until OOM-killed",
        "report": "The workers get OOM-killed every six hours or so; memory climbs steadily from 300 MB to the 2 GB "
                  "limit.",
        "cause": "{file} registers a new event listener on every job and never removes it, so each job's closure "
                 "(including its payload) stays reachable.",
        "fix": "PR #{pr} registers the listener once at start-up; memory now stays flat around 320 MB over 24 hours.",
        "asks": ["Why were the workers getting OOM-killed?", "What fixed the worker memory leak?"],
        "paraphrases": ["The processes that handle queued chores kept dying after a few hours; what was wrong and what changed?"],
    },
    {
        "key": "n-plus-one", "area": "handlers", "title": "slow list endpoint from N+1 queries",
        "report": "GET /v1/{domains}?limit=100 takes 4 seconds. The query log shows 201 queries for one request.",
        "cause": "{file} loads each {domain}'s customer and refunds lazily inside the serializer loop: one query per "
                 "row per relation.",
        "fix": "PR #{pr} eager-loads customers and refunds in two batched queries; the endpoint is down to 90 ms.",
        "asks": ["Why was the list endpoint taking four seconds?", "How did we speed up GET /v1/{domains}?"],
        "paraphrases": ["Fetching a page of a hundred records was painfully sluggish; what made it slow and what cured it?"],
    },
    {
        "key": "dst-cron", "area": "scheduler", "title": "nightly job ran twice on the DST change",
        "report": "The nightly reconciliation ran twice on Sunday and created duplicate payout rows.",
        "cause": "The schedule in {file} is in Europe/Berlin local time; when clocks went back, 02:30 happened twice.",
        "fix": "PR #{pr} schedules the job at 01:30 UTC and adds a unique constraint on (payout_date, merchant_id) so "
               "a rerun cannot duplicate payouts.",
        "asks": ["Why did the nightly reconciliation run twice?", "What did we change after the duplicate payouts on the DST weekend?"],
        "paraphrases": ["When the clocks moved back in autumn, a scheduled chore fired two times; why, and what prevents it now?"],
    },
    {
        "key": "cache-stampede", "area": "cache", "title": "cache stampede after deploys",
        "report": "Every deploy is followed by a minute of 502s; the database CPU spikes to 100% right after the new "
                  "pods come up.",
        "cause": "The cache keys in {file} all expire together and the new pods start cold, so hundreds of requests "
                 "recompute the same merchant settings at once.",
        "fix": "PR #{pr} adds a per-key lock (single flight) and jitters TTLs by ±10%; deploys no longer spike the "
               "database.",
        "asks": ["What caused the 502s right after every deploy?", "How did we stop the database spike after deploys?"],
        "paraphrases": ["Why did releasing new code briefly knock the service over, and what calmed it down?"],
    },
    {
        "key": "utf8-csv", "area": "exports", "title": "garbled names in CSV exports",
        "report": "Merchants say names like Zoë and Müller come out as ZoÃ« in the CSV export when opened in Excel.",
        "cause": "{file} writes UTF-8 without a byte order mark and Excel on Windows assumes cp1252.",
        "fix": "PR #{pr} writes the export as UTF-8 with a BOM (`utf-8-sig`); the download also sets "
               "`charset=utf-8` in Content-Type.",
        "asks": ["Why did accented names come out garbled in the CSV export?", "What fixed the broken characters in exports?"],
        "paraphrases": ["Spreadsheet users saw mojibake instead of umlauts in downloaded reports; what was changed?"],
    },
    {
        "key": "jwt-clock-skew", "area": "auth", "title": "intermittent 401s from token clock skew",
        "report": "Some API clients get random 401s with `token used before issued (iat)` right after logging in.",
        "cause": "{file} validates iat and nbf with zero leeway, and one of our nodes' clocks runs two seconds fast.",
        "fix": "PR #{pr} allows 30 s of leeway on iat and nbf and enables chrony on the nodes.",
        "asks": ["Why were clients getting random 401s right after login?", "What fixed the `token used before issued` errors?"],
        "paraphrases": ["Freshly signed-in callers were sometimes turned away; what was off and what did we adjust?"],
    },
    {
        "key": "migration-lock", "area": "db", "title": "migration locked the table in production",
        "report": "The release at 14:00 took the API down for six minutes: the migration adding the `reference` column "
                  "held an ACCESS EXCLUSIVE lock on the {domains} table.",
        "cause": "The migration in {file} added the column with a volatile default, which rewrites the whole table "
                 "under lock.",
        "fix": "PR #{pr} splits it: add the nullable column, backfill in batches of 5,000, then set the default; CI now "
               "runs squawk on every migration.",
        "asks": ["What caused the six-minute outage during the release?", "How do we now avoid migrations locking big tables?"],
        "paraphrases": ["Why did a routine release freeze the service for several minutes, and what guards against it now?"],
    },
    {
        "key": "retry-storm", "area": "client", "title": "retry storm against the processor",
        "report": "The processor rate-limited us (HTTP 429) for twenty minutes; our outbound call volume was ten times "
                  "normal.",
        "cause": "{file} retries immediately on 429 with no backoff, and each retry is itself retried by the job "
                 "runner: retries multiplied.",
        "fix": "PR #{pr} honours Retry-After, uses exponential backoff with jitter, and the job runner no longer "
               "retries calls that already retried.",
        "asks": ["Why did the processor rate-limit us for twenty minutes?", "What changed after the 429 storm?"],
        "paraphrases": ["Our partner throttled us after we hammered them; why did we hammer them and what stops it now?"],
    },
    {
        "key": "stale-read", "area": "db", "title": "stale reads from the replica after writes",
        "report": "Right after a refund, the dashboard still shows the old balance for a few seconds; support gets "
                  "tickets about it.",
        "cause": "{file} sends every GET to the read replica, which lags the primary by up to 3 s.",
        "fix": "PR #{pr} pins a session to the primary for 5 s after it writes (a cookie-based read-your-writes "
               "window).",
        "asks": ["Why did the dashboard show old balances after a refund?", "How did we fix the stale balance after writes?"],
        "paraphrases": ["Customers saw outdated figures moments after changing something; why, and what made it consistent?"],
    },
    {
        "key": "flaky-test", "area": "tests", "title": "flaky test depending on ordering",
        "report": "`test_list_returns_newest_first` fails about one run in ten on CI but never locally.",
        "cause": "Rows created in the same millisecond tie on created_at, and {file} orders only by created_at, so "
                 "Postgres may return them in either order.",
        "fix": "PR #{pr} orders by (created_at, id) in the query and the test creates rows with explicit timestamps.",
        "asks": ["Why was test_list_returns_newest_first flaky?", "What fixed the flaky ordering test?"],
        "paraphrases": ["One check in the suite failed now and then only on the build server; what was the cause?"],
    },
    {
        "key": "currency-exponent", "area": "billing", "title": "yen amounts shown 100 times too large",
        "report": "A Japanese merchant's dashboard shows ¥150,000 for a ¥1,500 order.",
        "cause": "{file} divides every amount by 100 for display, but JPY has no minor unit.",
        "fix": "PR #{pr} looks up the ISO 4217 exponent per currency (0 for JPY and KRW, 3 for BHD) before formatting.",
        "asks": ["Why were yen amounts shown a hundred times too large?", "How did we fix the JPY display bug?"],
        "paraphrases": ["A shop in Tokyo saw prices inflated by two orders of magnitude on screen; what was wrong?"],
    },
]
