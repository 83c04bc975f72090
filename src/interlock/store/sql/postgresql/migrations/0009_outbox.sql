-- The outbox: every event that concerns a person (a request for them, and the end of it:
-- answered, rejected, expired or cancelled) gets a row here in the transaction that
-- appends the event, through the trigger below, so no committed change is ever left
-- without its notice. The delivery loops of every node route each notice (`routed_at`)
-- into `deliveries`, one per channel and address, and send those with retries; rows are
-- claimed with FOR UPDATE SKIP LOCKED and held by a lease (`lease_owner`, `lease_until`),
-- so two nodes do not send the same delivery while its lease runs.
CREATE TABLE outbox (
    id          bigserial PRIMARY KEY,
    event_id    bigint NOT NULL UNIQUE,
    type        text NOT NULL,
    request_id  text NOT NULL,
    recipient   text,
    at          timestamptz NOT NULL,
    routed_at   timestamptz,
    lease_owner text,
    lease_until timestamptz
);

CREATE INDEX outbox_unrouted ON outbox (id) WHERE routed_at IS NULL;

-- AFTER the event's own BEFORE trigger has drawn its id; it inserts one new row and waits
-- on no lock, so the event insert stays its transaction's last statement in effect.
CREATE FUNCTION interlock_outbox_of_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (event_id, type, request_id, recipient, at)
    SELECT NEW.id, NEW.type, NEW.request_id, r.recipient, NEW.at FROM requests r WHERE r.id = NEW.request_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_of_events AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.request_id IS NOT NULL AND NEW.type IN ('created', 'answered', 'rejected', 'expired', 'cancelled'))
    EXECUTE FUNCTION interlock_outbox_of_event();

-- One delivery of a notice to one channel and address. `id` is its idempotency key (the
-- same notice routed twice gives the same ids). `status`: pending (due at `due_at`),
-- delivered, dead (out of attempts: a dead letter, kept until retried), skipped (a
-- reminder or escalation for a request that settled first). `reference`: what the channel
-- answered a delivery with (a Slack message's id), so that a later one can update it.
CREATE TABLE deliveries (
    id           text PRIMARY KEY,
    notice       bigint NOT NULL REFERENCES outbox (id),
    request_id   text NOT NULL,
    kind         text NOT NULL,
    event        text NOT NULL,
    recipient    text NOT NULL,
    channel      text NOT NULL,
    address      text,
    status       text NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    due_at       timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    delivered_at timestamptz,
    last_error   text,
    reference    text,
    lease_owner  text,
    lease_until  timestamptz
);

CREATE INDEX deliveries_due ON deliveries (due_at) WHERE status = 'pending';
CREATE INDEX deliveries_by_request ON deliveries (request_id, id);
CREATE INDEX deliveries_by_status ON deliveries (status, id);
CREATE INDEX deliveries_by_recipient ON deliveries (recipient, id);
