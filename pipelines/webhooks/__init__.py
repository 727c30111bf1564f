"""Webhooks: subscriptions the tool manages, a receiver that verifies deliveries into a durable
inbox beside the warehouse, drains that load just the records the inbox names, and the polls'
count of what the webhooks missed.

Modules, each importing only the ones above it: `secrets_file` (the signing secrets), `inbox`
(the SQLite inbox), `verify` (one delivery judged), `ledger` (what a poll finds the webhooks
missed), `subscriptions` (the service's subscription endpoints), `drain` (a load of what the
inbox names), `trigger` (when the receiver drains), `receiver` (the HTTP app and its server),
`display` and `cli` (the `signing-etl webhooks` commands), `demo` (the demo's webhook step).
Nothing is imported here, so a load (`pipelines.load.run`) can use `ledger` without loading
the rest.
"""
