"""Constants of the signing source: endpoints, page sizes, pacing and retry defaults."""

# Largest page the API allows on lists (reference: limit 1..200); fewer pages, fewer requests.
PAGE_SIZE = 200
MAX_PAGE_SIZE = 200
# Largest audit trail page (reference: limit up to 500, newest first).
EVENTS_LIMIT = 500
# Records shared by two consecutive pages; they anchor the next page so that a list that
# shifts while it is read is noticed instead of silently skipping a record.
PAGE_OVERLAP = 4
# Pages in a row that bring no record the pass has not read (a step back is one) before the
# pass gives up on a list: an honest list needs one or two after a shift; a service that lies
# about its `total` or ignores `offset` would otherwise be paged forever. A pass that gives up
# keeps what it read, warns, and leaves the cursor where it was.
MAX_PAGES_WITHOUT_NEW_RECORDS = 20

# The reference's stated per-key rate: 10 requests per second with a burst of 40. The pacer
# starts here and then obeys the X-RateLimit-* headers of every response.
REQUESTS_PER_SECOND = 10.0
BURST = 40
# The pacer sends at this share below every rate it knows (the one configured, a per-minute
# limit the headers reveal): at exactly the allowance, the service's bucket and ours drift
# apart by a request now and then, and the service refuses it (an earned 429).
PACE_MARGIN = 0.1
# Child endpoints (events, fields, document details) fetched at once, all through one pacer.
CHILD_CONCURRENCY = 8

# Each list's next cursor is the server's time when its pass began minus this lag, so changes
# made while a run pages, or stamped by a server whose clock is a little behind, are read again.
CURSOR_LAG_SECONDS = 30.0

# After a pass of several requests, passes that re-read what changed meanwhile, at most this
# many; the run's cursor stays at the last one's start, so a busier list is finished next run.
MAX_CATCH_UP_PASSES = 3

# Each socket operation (connect, each read) waits at most this long ...
REQUEST_TIMEOUT_SECONDS = 30.0
# ... and a whole request, from sending to the last byte of its answer, at most this long: a
# server that drips one byte every 29 s gets no further. A request past it is a failure that
# may pass (retried, and counted toward `GIVE_UP_AFTER_SECONDS`).
REQUEST_DEADLINE_SECONDS = 120.0
# Largest answer, decompressed, that is read (the largest page of 200 records is well under
# 1 MiB). A larger one stops the run at once, not retried: it would come back the same.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# Deepest nesting of an answer's JSON: records are hashed and loaded with orjson, which writes
# at most 255 levels; the reference's deepest is 4 (a filled-in payment value).
MAX_JSON_DEPTH = 64
# Attempts per request on time-outs, connection errors, 5xx and truncated bodies.
MAX_ATTEMPTS = 8
# A service that fails every request for this long in a row (across all threads; from the
# sending of the first failed one, 5xx answers included) is given up on: the run stops,
# keeping what it fetched, and exits 1 naming the host. No back-off sleeps past it.
GIVE_UP_AFTER_SECONDS = 120.0
# A 429 whose Retry-After asks for longer stops the run (exit 75) instead of waiting.
MAX_RETRY_AFTER_SECONDS = 300.0
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0
# 429s answered for one request before giving up (each one waits its Retry-After).
MAX_THROTTLED_RETRIES = 50

# Endpoints the load can do without: a 403 there (the key lacks the scope in the value) skips
# that resource with a warning instead of failing the run. The reference gives webhooks to the
# `write` scope, and a read-only key is what we recommend.
SKIPPABLE_ON_403: dict[str, str] = {"/webhooks": "write"}

# Incremental list endpoints: resource name -> (path, extra query parameters).
# Each answers {data: [...], total, limit, offset}; documents and contacts carry updated_at,
# shipments do not (the reference lists no updated_at on a shipment), so no list relies on it.
LIST_ENDPOINTS: dict[str, tuple[str, dict[str, str]]] = {
    "documents": ("/documents", {}),
    "shipments": ("/shipments", {"include_archived": "true"}),
    "contacts": ("/contacts", {}),
}

# The raw tables' columns and their types (timestamps, booleans, ...) are in `columns.py`.

# The resources of the source, in the order it yields them (a load may choose a subset).
RESOURCES = (
    "workspaces",
    "documents",
    "shipments",
    "audit_events",
    "shipment_fields",
    "contacts",
    "webhooks",
)
# Shipments and their children come from one list pass: loading one without the others would
# move the list's cursor past changes whose children were never fetched.
SHIPMENT_RESOURCES = ("shipments", "audit_events", "shipment_fields")

# Keys of each resource's dlt state (`pipeline.state["sources"]["signing"]["resources"][name]`),
# named once: written by the resources, read back by `incremental.describe_sync` for `status`.
# Earlier versions wrote the same keys, so a warehouse they loaded continues.
STATE_CURSOR = "cursor"  # ISO time the next run reads changes from
STATE_KNOWN = "known"  # fingerprints of what the next run may read again
STATE_PASS = "pass"  # a pass a stop cut short, to resume
STATE_PENDING = "pending"  # shipments whose child endpoint is still to fetch
STATE_PENDING_DETAILS = "pending_details"  # documents whose detail is still to fetch
STATE_FINGERPRINT = "fingerprint"  # the workspace row as last loaded
STATE_FINGERPRINTS = "fingerprints"  # the webhooks as last loaded, by id
STATE_READ_AT = "read_at"  # when the webhooks were last read (the service's clock)
# The list each incremental resource pages through, as `status` names its cursor.
LIST_OF_RESOURCE = {
    "documents": "documents",
    "shipment_changes": "shipments",
    "contacts": "contacts",
}
STATE_DELETIONS = "deletions"  # the list's last full check for deleted records (`FullCheck`)

# Deleted records: the service announces no deletion (the application deletes contacts,
# documents and shipments; they vanish from lists and answer 404), so the source reconciles.
# A list whose `total` agrees with the warehouse's live rows costs one request (`limit=1`):
# this count check runs when the run loaded records of the list, or when the last one is this
# many hours old (by the service's clock; 0: every run). The subscriptions list (GET /webhooks)
# is read on the same cadence. With hourly runs and nothing new, a run makes 4 requests, and 4
# more every 6 hours.
COUNT_CHECK_EVERY_HOURS = 6.0
# A full pass over a list's ids runs where the count disagrees, on request (`--reconcile`), or
# when the last one is older than this many hours (by the service's clock): it finds the
# deletions a count cannot (one record deleted, another restored).
FULL_CHECK_MAX_AGE_HOURS = 168.0
# A full pass that would mark more than this share of a table's live rows marks nothing and
# fails the run (unless the load allows a mass deletion): a pass cut short by something nobody
# noticed looks exactly like a mass deletion ...
MASS_DELETE_SHARE = 0.10
# ... except that so few records are never a mass deletion: a list this short is read in one
# page, so no pass over it stops halfway (a workspace with 8 templates may delete one).
MASS_DELETE_FLOOR = 10
# A record missing from a complete pass is marked deleted only once its own GET answers 404:
# at most this many such requests per list and run (the rest are asked by the next run).
CONFIRMATIONS_PER_LIST = 200
# What a noticed deletion does to the warehouse: `soft` keeps the rows with `_deleted_at`
# (when the pipeline noticed); `hard` removes the record's rows, its nested and child rows.
DELETE_MODES = ("soft", "hard")
# Tables whose rows belong to a record that can be deleted: the lists' own (and their nested
# tables), and the child tables of a shipment with the column that names it.
DELETABLE_TABLES = ("documents", "shipments", "contacts")
CHILD_TABLES: dict[str, dict[str, str]] = {
    "shipments": {"audit_events": "shipment_id", "shipment_fields": "shipment_id"},
}
DELETED_AT = "_deleted_at"  # the column a soft-deleted row carries

# Records read one by one, by id (`records_source`: what webhook deliveries named). Each
# resource has a name of its own, so its dlt state (pending children) is its own and the
# incremental resources' cursors and backlogs never move; each writes the same table, with the
# same keys, as the resource it mirrors (the key of this table).
SHIPMENTS_READ_BY_ID = "shipments_read_by_id"  # feeds the three shipment tables; no table
BY_ID_RESOURCES: dict[str, str] = {
    "shipments": "shipments_by_id",
    "audit_events": "audit_events_by_id",
    "shipment_fields": "shipment_fields_by_id",
    "contacts": "contacts_by_id",
}
