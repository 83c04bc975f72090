-- Capability grants as issued: by an answer that chose and echoed them (`request_id`,
-- `ask_id`, `option_id` say which choice), or given directly (a delegation, no request).
-- `issuer` is the person who consented, `audience` who may use it; `resource` and
-- `ability` are the grant's `with` and `can`.
CREATE TABLE grants (
    id         text PRIMARY KEY,
    resource   text NOT NULL,
    ability    text NOT NULL,
    issuer     text,
    audience   text,
    issued_at  timestamptz NOT NULL,
    expires_at timestamptz,
    request_id text REFERENCES requests (id),
    ask_id     text,
    option_id  text,
    revoked_at timestamptz,
    revoked_by text
);

CREATE INDEX grants_by_audience ON grants (audience, ability, resource);
CREATE INDEX grants_by_issuer ON grants (issuer, id);
CREATE INDEX grants_by_request ON grants (request_id);

-- Store one grant from its `granted` event's data (`{grant, to, by, request}`) and append
-- that event, shown to its audience (as the recipient) and its issuer (as the requester).
CREATE FUNCTION interlock_insert_grant(p_event json)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    g json := p_event -> 'grant';
    event_id bigint;
BEGIN
    INSERT INTO grants (id, resource, ability, issuer, audience, issued_at, expires_at, request_id, ask_id, option_id)
    VALUES (
        g ->> 'id', g ->> 'with', g ->> 'can', g ->> 'issuer', g ->> 'audience',
        (g ->> 'issued_at')::timestamptz, (g ->> 'expires_at')::timestamptz,
        g ->> 'request_id', g ->> 'ask_id', g ->> 'option_id'
    );
    INSERT INTO events (type, at, data, recipient, requester)
    VALUES ('granted', (g ->> 'issued_at')::timestamptz, p_event, g ->> 'audience', g ->> 'issuer')
    RETURNING id INTO event_id;
    RETURN event_id;
END
$$;

-- Settle a pending request with an answer and store the grants it issued (`p_events`: a
-- JSON array of `granted` event data), in one transaction: the answer and its grants land
-- together or not at all. The settlement's event id, or NULL when it was not pending.
CREATE FUNCTION interlock_settle_granting(
    p_id text, p_status text, p_settled_at timestamptz, p_response json, p_events json
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    event_id bigint;
    item json;
BEGIN
    event_id := interlock_settle(p_id, p_status, p_settled_at, p_response);
    IF event_id IS NULL THEN
        RETURN NULL;
    END IF;
    FOR item IN SELECT value FROM json_array_elements(p_events) LOOP
        PERFORM interlock_insert_grant(item);
    END LOOP;
    RETURN event_id;
END
$$;
