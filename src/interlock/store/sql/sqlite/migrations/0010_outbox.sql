-- The outbox: every event that concerns a person (a request for them, and the end of it:
-- answered, rejected, expired or cancelled) gets a row here in the transaction that
-- appends the event, through the trigger below, so no committed change is ever left
-- without its notice. The delivery loop routes each notice (`routed_at`) into
-- `deliveries`, one per channel and address, and sends those with retries.
-- `lease_owner` / `lease_until`: the delivery loop that holds the row until then.
CREATE TABLE outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    INTEGER NOT NULL UNIQUE,
    type        TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    recipient   TEXT,
    at          INTEGER NOT NULL,
    routed_at   INTEGER,
    lease_owner TEXT,
    lease_until INTEGER
);

CREATE INDEX outbox_unrouted ON outbox (id) WHERE routed_at IS NULL;

CREATE TRIGGER outbox_of_events AFTER INSERT ON events
WHEN NEW.request_id IS NOT NULL AND NEW.type IN ('created', 'answered', 'rejected', 'expired', 'cancelled')
BEGIN
    INSERT INTO outbox (event_id, type, request_id, recipient, at)
    SELECT NEW.id, NEW.type, NEW.request_id, r.recipient, NEW.at FROM requests r WHERE r.id = NEW.request_id;
END;

-- One delivery of a notice to one channel and address. `id` is its idempotency key (the
-- same notice routed twice gives the same ids). `status`: pending (due at `due_at`),
-- delivered, dead (out of attempts: a dead letter, kept until retried), skipped (a
-- reminder or escalation for a request that settled first). `reference`: what the channel
-- answered a delivery with (a Slack message's id), so that a later one can update it.
CREATE TABLE deliveries (
    id           TEXT PRIMARY KEY,
    notice       INTEGER NOT NULL REFERENCES outbox (id),
    request_id   TEXT NOT NULL,
    kind         TEXT NOT NULL,
    event        TEXT NOT NULL,
    recipient    TEXT NOT NULL,
    channel      TEXT NOT NULL,
    address      TEXT,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    due_at       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER,
    last_error   TEXT,
    reference    TEXT,
    lease_owner  TEXT,
    lease_until  INTEGER
);

CREATE INDEX deliveries_due ON deliveries (due_at) WHERE status = 'pending';
CREATE INDEX deliveries_by_request ON deliveries (request_id, id);
CREATE INDEX deliveries_by_status ON deliveries (status, id);
CREATE INDEX deliveries_by_recipient ON deliveries (recipient, id);
