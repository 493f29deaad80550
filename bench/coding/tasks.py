"""Hand-written work sessions: the bulk of a coding assistant's history (implementing, reviewing,
refactoring), about the project's own code but asked about by no question. They share the
evidence's vocabulary (the domain, the files, the infrastructure), which is what makes them hard
distractors. `{path:AREA}` names a file of the project by its role (facts.AREAS).
"""

from __future__ import annotations

TASKS: list[list[tuple[str, str]]] = [
    [("user", "Add cursor pagination to GET /v1/{domains}. Offset pagination is getting slow past page 200."),
     ("assistant", "I'll encode (created_at, id) of the last row as an opaque base64 cursor and accept `starting_after`. "
                   "The change is in {path:handlers}; the response gains `has_more` and `next_cursor`."),
     ("user", "Keep `offset` working for one release with a deprecation header."),
     ("assistant", "Done: `offset` still works and responses using it carry `Deprecation: true` and a Link to the docs.")],
    [("user", "Write tests for the refund flow: full refund, partial refund, refund larger than the amount."),
     ("assistant", "Added three tests in {path:tests}. The over-refund case expects a 422 with code `refund_exceeds_amount`; "
                   "partial refunds check the remaining refundable amount."),
     ("user", "Also a test that two partial refunds can't exceed the total together."),
     ("assistant", "Added `test_partial_refunds_cannot_exceed_total`; it fails today, so there is a real gap in the check.")],
    [("user", "Rename `customer_ref` to `external_customer_id` everywhere. It confuses partners."),
     ("assistant", "The field appears in the API models, the serializer, two queries and the docs. I kept the old name "
                   "as an accepted alias on input for now and only emit the new name on output.")],
    [("user", "Can you review this diff? I moved the {domain} status transitions into a state machine."),
     ("assistant", "The transitions read much better. Two issues: `captured -> refunded` skips `partially_refunded`, and the "
                   "machine is rebuilt per request; build it once at import. Otherwise looks good."),
     ("user", "Fixed both, thanks.")],
    [("user", "The {domains} list in the dashboard should be filterable by status and date range."),
     ("assistant", "I'll add `status` (repeatable) and `created[gte]`/`created[lt]` query parameters in {path:handlers} and "
                   "an index on (merchant_id, status, created_at) so the filter stays fast."),
     ("user", "Sounds right. Make the date range inclusive of the start, exclusive of the end."),
     ("assistant", "That's what `gte`/`lt` give us; I documented it in the OpenAPI descriptions.")],
    [("user", "Profile the create endpoint, it feels slower since last week."),
     ("assistant", "py-spy and the traces agree: 40% of the time is spent serialising the response twice, once for the "
                   "audit log and once for the client. Reusing the first serialisation cuts p50 from 48 ms to 29 ms.")],
    [("user", "Set up a pre-commit config: formatting, lint, and a check that no secrets are committed."),
     ("assistant", "Added `.pre-commit-config.yaml` with the formatter, the linter and gitleaks. CI runs `pre-commit run "
                   "--all-files` so nobody can skip it by not installing the hook.")],
    [("user", "Extract the fee calculation out of {path:billing} into its own module."),
     ("assistant", "Moved it to a `fees` module with pure functions `fee_for(amount, plan)` and `fee_breakdown(...)`; "
                   "the callers import it and the old names re-export it for one release."),
     ("user", "Do the pure functions need the database at all?"),
     ("assistant", "No: the plan is passed in, so the tests for fees no longer need fixtures.")],
    [("user", "Our error responses are inconsistent. Propose one shape."),
     ("assistant", "`{{\"error\": {{\"type\": ..., \"code\": ..., \"message\": ..., \"param\": ...}}}}` for every 4xx and 5xx, "
                   "with `type` from a closed set (invalid_request, authentication, rate_limit, api). I can migrate the "
                   "handlers one router at a time."),
     ("user", "Go ahead, start with the {domains} router.")],
    [("user", "Add an audit log entry whenever an admin changes a merchant's payout schedule."),
     ("assistant", "Added `audit_events` rows with actor, action, before and after JSON, written in the same transaction "
                   "as the change. The admin UI shows them under the merchant's history tab.")],
    [("user", "Write the docs page for the {domains} API: authentication, creating one, listing, errors."),
     ("assistant", "Drafted it with a curl example per endpoint and the error table generated from the codes enum so it "
                   "can't drift. It's in docs/api/{domains}.md.")],
    [("user", "The health check hits the database on every call. Is that a problem?"),
     ("assistant", "For the load balancer's liveness check, yes: a database blip would restart every pod at once. Split "
                   "it: /healthz checks only the process, /readyz checks the database and the cache.")],
    [("user", "Add a CLI command to replay a {domain} event to a merchant's webhook endpoint."),
     ("assistant", "Added `manage replay-event EVENT_ID [--endpoint ID]`; it reuses the normal delivery path, so the "
                   "signature and retry behaviour are the same as for live events.")],
    [("user", "Help me write the migration plan for splitting the {domains} table by merchant region."),
     ("assistant", "1. Add the region column and backfill. 2. Create the regional tables and dual-write. 3. Backfill "
                   "them and compare counts nightly. 4. Switch reads per region behind a flag. 5. Stop dual-writing."),
     ("user", "How long would the backfill take for 40M rows?"),
     ("assistant", "At 5,000 rows per batch and about 200 ms a batch, roughly 27 minutes of work, spread over a few "
                   "hours if we throttle to keep replica lag down.")],
    [("user", "Is there a way to see which endpoints partners still call with the v1 field names?"),
     ("assistant", "Log a counter per (partner, deprecated field) in the request parser and chart it; after two quiet "
                   "weeks per partner we can drop the alias safely.")],
    [("user", "Dependabot opened 14 PRs. Which ones are risky?"),
     ("assistant", "Patch bumps of dev tools are safe to batch. The two risky ones are the web framework minor release "
                   "(it changes middleware ordering) and the cryptography major (drops OpenSSL 1.1). Merge those alone.")],
    [("user", "Add structured request ids that flow from the API into the background jobs."),
     ("assistant", "The middleware now reads or creates `X-Request-Id`; job payloads carry it, and the worker binds it "
                   "to the log context, so one id follows a request into every job it starts.")],
    [("user", "Write a load test for the create endpoint at 200 requests per second."),
     ("assistant", "Added a k6 script that ramps to 200 rps over two minutes and holds for ten, with thresholds on p95 "
                   "under 250 ms and errors under 0.1%. It reads the API key from an environment variable.")],
    [("user", "Clean up the settings: half of them are unused."),
     ("assistant", "Found 11 settings nothing reads. Removed them and made {path:settings} fail at start-up on unknown "
                   "prefixed variables, so stale ones in the deploy config get noticed.")],
    [("user", "Add an index for the dashboard query that filters by merchant and sorts by created_at."),
     ("assistant", "Created `CREATE INDEX CONCURRENTLY ix_{domains}_merchant_created ON {domains} (merchant_id, "
                   "created_at DESC)`. The plan went from a 1.2 s sequential scan to a 4 ms index scan.")],
    [("user", "Why does mypy complain about Optional in the service layer after the upgrade?"),
     ("assistant", "The new version no longer treats a default of None as implying Optional. Annotate those parameters "
                   "as `X | None`; I fixed the 23 occurrences in the service layer.")],
    [("user", "Prepare the release notes for this week."),
     ("assistant", "Highlights: cursor pagination on the list endpoint, consistent error bodies, audit entries for payout "
                   "schedule changes. Deprecations: `offset` pagination and `customer_ref`. No breaking changes.")],
    [("user", "Add a `--dry-run` flag to the backfill script so ops can see what it would change."),
     ("assistant", "With `--dry-run` the script runs the same queries inside a transaction, prints the row counts per "
                   "table and rolls back. The summary line is machine-readable so the runbook can grep it.")],
    [("user", "Can you generate TypeScript types from our OpenAPI spec for the dashboard team?"),
     ("assistant", "openapi-typescript produces a single `api.d.ts`; I added a make target and a CI check that fails "
                   "when the committed types are stale, so the dashboard never drifts from the API.")],
    [("user", "The {domain} status webhook payload is missing the previous status. Add it."),
     ("assistant", "Added `previous_status` to the `{domain}.status_changed` payload. It is additive, so existing "
                   "merchants are unaffected; the changelog entry and the payload docs are updated."),
     ("user", "Does the replay CLI send the new field too?"),
     ("assistant", "Yes, it builds payloads with the same serializer as live deliveries.")],
    [("user", "Help me debug: the worker logs `connection reset by peer` every few minutes."),
     ("assistant", "The load balancer closes idle connections after 350 s, and our keepalive is 600 s. Set the "
                   "client's idle timeout below 350 s; the resets should stop without any retry changes.")],
    [("user", "Add soft delete to merchants: deleted ones must disappear from lists but keep their history."),
     ("assistant", "Added `deleted_at` with a partial index on live rows; list queries filter on it through a "
                   "default scope, and the admin can still open a deleted merchant from its id.")],
    [("user", "Write a runbook entry for when the {domains} backlog grows."),
     ("assistant", "1. Check the worker dashboard for errors versus slowness. 2. If errors, look at the last deploy "
                   "and roll back. 3. If slowness, scale workers to 2x and watch the database CPU. 4. Page the owner "
                   "if the backlog is older than 30 minutes.")],
    [("user", "Why is the Docker image 1.4 GB? Can we slim it?"),
     ("assistant", "The build tools and the test dependencies end up in the final stage. A multi-stage build that "
                   "copies only the installed packages and the app brings it to about 180 MB.")],
    [("user", "Add an endpoint that returns a merchant's {domain} totals per day for the last 30 days."),
     ("assistant", "GET /v1/reports/daily-totals groups by the merchant's local day, so totals match what the "
                   "dashboard shows. It reads from the reporting replica and is cached for five minutes."),
     ("user", "Include days with zero {domains} as zeros, the chart breaks otherwise."),
     ("assistant", "Done: the query left-joins a generated series of days, so every day appears.")],
    [("user", "Refactor the service layer so handlers don't pass the session around explicitly."),
     ("assistant", "A unit-of-work object now owns the session and the transaction; handlers get it from the "
                   "dependency container and services take it as their first argument. 38 call sites changed, no "
                   "behaviour change, all tests pass.")],
    [("user", "Translate the error messages for the checkout into German and French."),
     ("assistant", "Moved the messages into the i18n catalog with keys per error code and added `de` and `fr`. The "
                   "API picks the language from Accept-Language and falls back to English.")],
    [("user", "Let's add contract tests with the ledger team so their consumer doesn't break on our changes."),
     ("assistant", "Pact fits: their consumer publishes expectations, our CI verifies them against the provider "
                   "before merge. I set up the broker credentials as CI secrets and added the verification job.")],
    [("user", "How do I run just the slow integration tests locally?"),
     ("assistant", "They are marked `integration`; run them with the marker selected, after starting the "
                   "dependencies with `docker compose up -d db cache`. They take about four minutes.")],
    [("user", "Add a metric for how long {domains} spend in the pending state."),
     ("assistant", "A histogram `{domain}_pending_seconds` observed when the status leaves pending, with buckets from "
                   "1 s to 1 h. The dashboard has a p50/p95 panel and an alert when p95 exceeds 10 minutes.")],
    [("user", "Review the README for onboarding: is anything out of date?"),
     ("assistant", "Three things: the setup section still mentions the old Makefile target, the environment variable "
                   "table misses the two new ones, and the architecture diagram predates the worker split.")],
    [("user", "Make the CSV import tolerate a trailing empty line and BOMs."),
     ("assistant", "The importer now strips a leading BOM and skips blank lines; a malformed row reports its line "
                   "number instead of failing the whole file. Tests cover both cases.")],
]
