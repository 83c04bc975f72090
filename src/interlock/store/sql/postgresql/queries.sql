-- name: unbounded_migrations
-- The database's own bounds on a statement, a lock wait and a pause inside a transaction
-- (statement_timeout, lock_timeout, idle_in_transaction_session_timeout: set for every
-- session of a database or role, they are meant for queries) do not bound the migrating
-- transaction: cut, it would roll back, and no process of this version could start. It
-- waits for a process migrating the same database, then runs each migration to its end,
-- however long the tables make it.
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = 0;
SET LOCAL idle_in_transaction_session_timeout = 0;

-- name: lock_migrations
-- Held until the end of the migrating transaction: processes that start together apply
-- the migrations one after the other, and all but the first find nothing left to do.
SELECT pg_advisory_xact_lock(7598390718262734180);

-- name: create_migrations
CREATE TABLE IF NOT EXISTS interlock_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migrations_kept
SELECT to_regclass('interlock_migrations') IS NOT NULL;

-- name: applied_migrations
SELECT version FROM interlock_migrations;

-- name: migrations_after
SELECT version, name FROM interlock_migrations WHERE version > $1 ORDER BY version;

-- name: record_migration
INSERT INTO interlock_migrations (version, name) VALUES ($1, $2);

-- name: insert_request
SELECT created, status, doc, response FROM interlock_insert($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: settle_request
SELECT interlock_settle($1, $2, $3, $4);

-- name: consume_request
SELECT interlock_consume($1, $2, $3);

-- name: get_consumption
SELECT consumed_by, consumed_at FROM requests WHERE id = $1;

-- name: release_request
UPDATE requests SET released_at = $2
WHERE id = $1 AND released_at IS NULL AND (status = 'pending' OR (doc->>'detached')::boolean IS TRUE)
RETURNING id;

-- name: get_release
SELECT released_at FROM requests WHERE id = $1;

-- name: settle_pending
SELECT id, doc FROM interlock_settle_pending($1, $2, $3, $4, $5, $6);

-- name: insert_event
INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING id;

-- name: close_channel
SELECT id, doc FROM interlock_close_channel($1, $2, $3, $4);

-- name: reopen_channel
DELETE FROM closed_channels WHERE channel = $1;

-- name: reopen_channel_for
DELETE FROM closed_channels WHERE channel = $1 AND requester = $2;

-- name: get_request
SELECT status, doc, response FROM requests WHERE id = $1;

-- name: find_idempotent
SELECT status, doc, response FROM requests WHERE coalesce(requester, '') = $1 AND idempotency_key = $2;

-- name: get_requests
SELECT id, status, doc, response FROM requests WHERE id = ANY($1::text[]);

-- name: get_settlement
SELECT status, response FROM requests WHERE id = $1;

-- name: get_status
SELECT status FROM requests WHERE id = $1;

-- name: next_expiry
SELECT min(expires_at) FROM pending_requests WHERE expires_at IS NOT NULL;

-- name: changes_after
SELECT e.id, e.type, e.request_id, r.status, r.response
FROM events e LEFT JOIN requests r ON r.id = e.request_id
WHERE e.id > $1 ORDER BY e.id LIMIT $2;

-- name: last_event_id
SELECT coalesce(max(id), 0) FROM events;

-- name: upsert_principal
INSERT INTO principals (name, kind, owner, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, owner = excluded.owner;

-- name: get_principal
SELECT name, kind, owner FROM principals WHERE name = $1
UNION ALL SELECT name, 'team', NULL FROM teams WHERE name = $1;

-- name: list_principals
SELECT name, kind, owner FROM principals UNION ALL SELECT name, 'team', NULL FROM teams ORDER BY name;

-- name: insert_token
INSERT INTO tokens (id, hash, principal, created_at, for_session) VALUES ($1, $2, $3, $4, $5);

-- name: list_tokens
SELECT id, principal, created_at, for_session FROM tokens WHERE revoked_at IS NULL ORDER BY principal, created_at, id;

-- name: tokens_all_revoked
SELECT EXISTS (SELECT 1 FROM tokens WHERE principal = $1 AND NOT for_session)
   AND NOT EXISTS (SELECT 1 FROM tokens WHERE principal = $1 AND NOT for_session AND revoked_at IS NULL);

-- name: cut_off
SELECT principal FROM tokens WHERE principal = ANY($1::text[]) AND NOT for_session
GROUP BY principal HAVING COUNT(revoked_at) = COUNT(*);

-- name: principal_for_token
SELECT p.name, p.kind, p.owner FROM tokens t JOIN principals p ON p.name = t.principal
WHERE t.hash = $1 AND t.revoked_at IS NULL;

-- name: listen
LISTEN interlock;

-- name: ping
SELECT 1;

-- name: note_key
-- The key that signs settlement notes (migration 0023): a random one made by the first
-- store to open on an empty table, the stored one ever after.
WITH made AS (
    INSERT INTO note_key (key)
    VALUES (sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')))
    ON CONFLICT (one) DO NOTHING
    RETURNING key
)
SELECT key FROM made UNION ALL SELECT key FROM note_key LIMIT 1;

-- name: derive_search
SELECT upto, last FROM interlock_derive_search($1);

-- name: search_word_shares
-- The words of the search texts in the most requests, with the share of requests each is
-- in, as ANALYZE last sampled them (none before the first ANALYZE).
SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs FROM pg_stats s
WHERE s.schemaname = current_schema() AND s.tablename = 'request_texts' AND s.attname = 'body';

-- name: live_token
SELECT t.id, p.name, p.kind, p.owner FROM tokens t JOIN principals p ON p.name = t.principal
WHERE t.hash = $1 AND t.revoked_at IS NULL;

-- name: revoke_tokens
SELECT interlock_revoke_tokens($1, $2, $3);

-- name: delete_expired_sessions
-- (with the tokens made for them alone, which nobody holds)
WITH ended AS (DELETE FROM sessions WHERE expires_at <= $1 RETURNING token)
DELETE FROM tokens t
WHERE t.for_session AND t.id IN (SELECT token FROM ended)
    AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.token = t.id AND s.expires_at > $1);

-- name: start_session
WITH made AS (
    INSERT INTO sessions (hash, id, token, csrf, created_at, expires_at)
    SELECT $1, $2, t.id, $3, $4, $5 FROM tokens t WHERE t.hash = $6 AND t.revoked_at IS NULL
    RETURNING id, token, csrf, expires_at
)
SELECT m.id, p.name, p.kind, p.owner, m.token, m.csrf, m.expires_at
FROM made m JOIN tokens t ON t.id = m.token JOIN principals p ON p.name = t.principal;

-- name: get_session
SELECT s.id, p.name, p.kind, p.owner, s.token, s.csrf, s.expires_at
FROM sessions s JOIN tokens t ON t.id = s.token JOIN principals p ON p.name = t.principal
WHERE s.hash = $1 AND s.expires_at > $2 AND t.revoked_at IS NULL;

-- name: end_session
SELECT id, principal, kind, owner, token, csrf, expires_at FROM interlock_end_session($1, $2);

-- name: insert_run
WITH inserted AS (
    INSERT INTO runs (id, agent, session, requester, status, max_duration, created_at, updated_at, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $9)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)
INSERT INTO events (type, at, data, requester, session, run)
SELECT 'run_started', $7, $8, $4, $3, $1 FROM inserted
RETURNING id;

-- name: insert_sole_run
-- A run that holds its session (`exclusive`): stored only if no run of its agent and
-- requester on that session has not ended. Two such starts at once both find none; the
-- index of unended sole runs (migration 0043) makes the second wait for the first to
-- commit, then store nothing. No row when a run of this id, or such a run, is stored.
WITH inserted AS (
    INSERT INTO runs (id, agent, session, requester, status, max_duration, created_at, updated_at, expires_at, sole)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::double precision, $7::timestamptz, $7::timestamptz,
           $9::timestamptz, true
    WHERE NOT EXISTS (
        SELECT 1 FROM runs
        WHERE session = $3::text AND agent = $2::text AND coalesce(requester, '') = coalesce($4::text, '')
          AND status IN ('running', 'waiting_for_input', 'waiting_for_approval')
    )
    ON CONFLICT DO NOTHING
    RETURNING id
)
INSERT INTO events (type, at, data, requester, session, run)
SELECT 'run_started', $7::timestamptz, $8, $4::text, $3::text, $1::text FROM inserted
RETURNING id;

-- name: unended_run_on_session
-- The newest run of an agent and requester on a session that has not ended (what an
-- exclusive start met). Read from `runs_unended_by_session` (migration 0045), as the look
-- of `insert_sole_run` is: one entry, whatever the session's history. Its status list is
-- the index's, word for word, so that the planner may read that index.
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM runs
WHERE session = $2::text AND agent = $1::text AND coalesce(requester, '') = coalesce($3::text, '')
  AND status IN ('running', 'waiting_for_input', 'waiting_for_approval')
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: get_run
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM runs WHERE id = $1;

-- name: lock_run
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM runs WHERE id = $1 FOR UPDATE;

-- name: start_parked
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM interlock_start_parked($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20);

-- name: settle_claiming
-- The claimed run by its columns (`RUN_COLUMNS`), not as the runs row it is: that row has
-- every column of the table, those a later migration adds too (0043's `sole`).
SELECT s.settled, (s.claimed).id, (s.claimed).agent, (s.claimed).session, (s.claimed).requester,
       (s.claimed).status, (s.claimed).terminal_reason, (s.claimed).ready, (s.claimed).worker,
       (s.claimed).lease_expires_at, (s.claimed).expires_at, (s.claimed).attempts, (s.claimed).max_duration,
       (s.claimed).created_at, (s.claimed).updated_at, (s.claimed).waiting_on, (s.claimed).state,
       (s.claimed).result, (s.claimed).error
FROM interlock_settle_claiming($1, $2, $3, $4, $5, $6, $7, $8, $9) AS s;

-- name: park_run
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM interlock_park_run($1, $2, $3, $4, $5, $6, $7);

-- name: claim_run
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM interlock_claim_run($1, $2, $3, $4, $5);

-- name: finish_run
-- The ended run, and whether requests of it are left pending (withdrawn after).
SELECT f.id, f.agent, f.session, f.requester, f.status, f.terminal_reason, f.ready, f.worker, f.lease_expires_at,
       f.expires_at, f.attempts, f.max_duration, f.created_at, f.updated_at, f.waiting_on, f.state, f.result, f.error,
       EXISTS (SELECT 1 FROM requests q WHERE q.run = f.id AND q.status = 'pending') AS left_pending
FROM interlock_finish_run($1, $2, $3, $4, $5, $6, $7) AS f;

-- name: renew_lease
UPDATE runs SET lease_expires_at = $1 WHERE id = $2 AND status = 'running' AND worker = $3;

-- name: lock_pending_of_run
SELECT id FROM requests WHERE run = $1 AND status = 'pending' ORDER BY id FOR UPDATE;

-- name: end_run
UPDATE runs SET status = $1, result = $2, error = $3, terminal_reason = $4, updated_at = $5, expires_at = NULL,
    ready = false, worker = NULL, lease_expires_at = NULL
WHERE id = $6
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: pending_of_run
SELECT status, doc, response FROM requests WHERE run = $1 AND status = 'pending' ORDER BY id;

-- name: runs_due
-- Runs past their deadline: parked on a person (not ready), or running held by no worker
-- (a worker's claim has none: its lease hands it on); whether it is the latter.
SELECT id, status = 'running' FROM runs WHERE expires_at IS NOT NULL AND expires_at <= $1
  AND ((status IN ('waiting_for_input', 'waiting_for_approval') AND NOT ready)
       OR (status = 'running' AND worker IS NULL))
ORDER BY expires_at LIMIT 100;

-- name: next_run_expiry
-- A ready run (every request settled) is not abandoned: it waits for a worker, not a person.
-- (A run has a deadline only while parked or running held by no worker.)
SELECT min(expires_at) FROM runs WHERE expires_at IS NOT NULL AND NOT ready;

-- name: restart_run
-- A running run no worker holds, started again by its process: a new deadline. No row
-- for any other run (parked, claimed by a worker, ended).
UPDATE runs SET expires_at = $1
WHERE id = $2 AND status = 'running' AND worker IS NULL
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: settle_granting
SELECT interlock_settle_granting($1, $2, $3, $4, $5);

-- name: insert_grant
SELECT interlock_insert_grant($1);

-- name: get_grant
SELECT id, resource, ability, issuer, audience, issued_at, expires_at, request_id, ask_id, option_id,
       revoked_at, revoked_by
FROM grants WHERE id = $1;

-- name: revoke_grant
UPDATE grants SET revoked_at = $1, revoked_by = $2 WHERE id = $3 AND revoked_at IS NULL
RETURNING id, resource, ability, issuer, audience, issued_at, expires_at, request_id, ask_id, option_id,
          revoked_at, revoked_by;
-- name: delete_expired_signin_links
DELETE FROM signin_links WHERE expires_at <= $1;

-- name: insert_signin_link
INSERT INTO signin_links (hash, principal, created_at, expires_at) VALUES ($1, $2, $3, $4);

-- name: use_signin_link
WITH used AS (
    UPDATE signin_links SET used_at = $2
    WHERE hash = $1 AND used_at IS NULL AND expires_at > $2
    RETURNING principal
)
SELECT p.name, p.kind, p.owner FROM used u JOIN principals p ON p.name = u.principal;
-- name: claim_notices
UPDATE outbox o SET lease_owner = $1, lease_until = $3
WHERE o.id IN (
    SELECT id FROM outbox
    WHERE routed_at IS NULL AND (lease_owner IS NULL OR lease_owner = $1 OR lease_until <= $2)
    ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED
)
RETURNING o.id, o.event_id, o.type, o.request_id, o.recipient, o.at;

-- name: route_notice
-- Mark the notice routed (if this loop still holds its lease) and add its deliveries,
-- given as a JSON array, in one statement: one round trip.
WITH routed AS (
    UPDATE outbox SET routed_at = $2, lease_owner = NULL, lease_until = NULL
    WHERE id = $1 AND routed_at IS NULL AND lease_owner = $3
    RETURNING id
), added AS (
    INSERT INTO deliveries (id, notice, request_id, kind, event, recipient, channel, address, status, attempts,
                            due_at, created_at, delivered_at, last_error, reference)
    SELECT d.id, d.notice, d.request_id, d.kind, d.event, d.recipient, d.channel, d.address, d.status, d.attempts,
           d.due_at, d.created_at, d.delivered_at, d.last_error, d.reference
    FROM jsonb_to_recordset($4::jsonb) AS d(
        id text, notice bigint, request_id text, kind text, event text, recipient text, channel text, address text,
        status text, attempts integer, due_at timestamptz, created_at timestamptz, delivered_at timestamptz,
        last_error text, reference text)
    WHERE EXISTS (SELECT 1 FROM routed)
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM added;

-- name: claim_deliveries
-- The channels with pending deliveries are walked from one name to the next along
-- deliveries_pending_by_channel, a look each; from each, as many due ones as $1 may still
-- take ($5 less those it holds, read from deliveries_leased; $5 NULL: $4) are read from
-- the front of its range, passing over the leased ones (no more than are being sent):
-- however many wait in a channel that is full, none of them is read.
WITH RECURSIVE walk(channel) AS (
    (SELECT channel FROM deliveries WHERE status = 'pending' ORDER BY channel LIMIT 1)
    UNION ALL
    SELECT (SELECT n.channel FROM deliveries n WHERE n.status = 'pending' AND n.channel > walk.channel
            ORDER BY n.channel LIMIT 1)
    FROM walk WHERE walk.channel IS NOT NULL
), picked AS (
    SELECT due.id, due.due_at FROM walk
    CROSS JOIN LATERAL (
        SELECT d.id, d.due_at FROM deliveries d
        WHERE d.status = 'pending' AND d.channel = walk.channel AND d.due_at <= $2
          AND (d.lease_owner IS NULL OR d.lease_until <= $2)
        ORDER BY d.due_at, d.id
        LIMIT greatest(0, coalesce($5::bigint - (SELECT count(*) FROM deliveries held
                                                  WHERE held.lease_owner = $1 AND held.channel = walk.channel
                                                    AND held.lease_until > $2), $4))
        FOR UPDATE SKIP LOCKED
    ) due
    WHERE walk.channel IS NOT NULL
    ORDER BY due.due_at, due.id LIMIT $4
)
UPDATE deliveries d SET lease_owner = $1, lease_until = $3
FROM picked WHERE d.id = picked.id
RETURNING d.id, d.notice, d.request_id, d.kind, d.event, d.recipient, d.channel, d.address, d.status,
          d.attempts, d.due_at, d.created_at, d.delivered_at, d.last_error, d.reference;

-- name: finish_delivery
UPDATE deliveries SET status = $1, attempts = $2, due_at = $3, delivered_at = $4, last_error = $5, reference = $6,
                      lease_owner = NULL, lease_until = NULL
WHERE id = $7 AND lease_owner = $8;

-- name: get_delivery
SELECT id, notice, request_id, kind, event, recipient, channel, address, status, attempts,
       due_at, created_at, delivered_at, last_error, reference FROM deliveries WHERE id = $1;


-- name: retry_delivery
UPDATE deliveries SET status = 'pending', attempts = 0, due_at = $2, lease_owner = NULL, lease_until = NULL
WHERE id = $1 AND status = 'dead'
RETURNING id, notice, request_id, kind, event, recipient, channel, address, status, attempts,
          due_at, created_at, delivered_at, last_error, reference;

-- name: next_outbox_due
SELECT coalesce((SELECT min(at) FROM outbox WHERE routed_at IS NULL),
                (SELECT min(due_at) FROM deliveries WHERE status = 'pending'));

-- name: put_policy
INSERT INTO approval_policies (agent, server, body, version, updated_at, updated_by)
VALUES ($1, $2, $3::jsonb, 1, $4, $5)
ON CONFLICT (agent, server) DO UPDATE
SET body = excluded.body, version = approval_policies.version + 1,
    updated_at = excluded.updated_at, updated_by = excluded.updated_by
RETURNING version;

-- name: get_policy
SELECT agent, server, body::text, version, updated_at, updated_by FROM approval_policies
WHERE agent = $1 AND server = $2;

-- name: list_policies
SELECT agent, server, body::text, version, updated_at, updated_by FROM approval_policies ORDER BY agent COLLATE "C", server COLLATE "C";

-- name: list_policies_of
SELECT agent, server, body::text, version, updated_at, updated_by FROM approval_policies
WHERE agent = $1 ORDER BY server COLLATE "C";

-- name: delete_policy
DELETE FROM approval_policies WHERE agent = $1 AND server = $2
RETURNING agent, server, body::text, version, updated_at, updated_by;
-- name: get_team
SELECT name FROM teams WHERE name = $1;

-- name: list_teams
SELECT name FROM teams ORDER BY name;

-- name: insert_team
INSERT INTO teams (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING;

-- name: insert_team_member
INSERT INTO team_members (team, member) VALUES ($1, $2) ON CONFLICT DO NOTHING;

-- name: delete_team_member
DELETE FROM team_members WHERE team = $1 AND member = $2;

-- name: lock_team
-- Held until the transaction ends: no member joins meanwhile (adding one takes a key
-- share lock on this row), so the members read next are all a deletion takes away.
SELECT name FROM teams WHERE name = $1 FOR UPDATE;

-- name: delete_team
DELETE FROM teams WHERE name = $1;

-- name: team_members
SELECT member FROM team_members WHERE team = $1 ORDER BY member;

-- name: teams_of
SELECT team FROM team_members WHERE member = $1 ORDER BY team;

-- name: claim_request
WITH claimed AS (
    INSERT INTO claims (request_id, claimed_by, claimed_at)
    SELECT id, $2, $3 FROM requests WHERE id = $1 AND status = 'pending'
    ON CONFLICT (request_id) DO NOTHING
    RETURNING request_id
)
INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
SELECT 'claimed', r.id, $3, $4::json, r.recipient, r.requester, r.session, r.run
FROM requests r JOIN claimed c ON c.request_id = r.id
RETURNING id;

-- name: get_claim
SELECT claimed_by, claimed_at FROM claims WHERE request_id = $1;

-- name: unclaim_request
WITH released AS (
    DELETE FROM claims WHERE request_id = $1 AND (claimed_by = $2 OR $2::text IS NULL)
        AND EXISTS (SELECT 1 FROM requests WHERE id = $1 AND status = 'pending')
    RETURNING request_id, claimed_by, claimed_at
), logged AS (
    INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
    SELECT 'unclaimed', r.id, $3, json_build_object('by', x.claimed_by), r.recipient, r.requester, r.session, r.run
    FROM requests r JOIN released x ON x.request_id = r.id
    RETURNING id
)
SELECT claimed_by, claimed_at FROM released;

-- name: claims_of
SELECT request_id, claimed_by, claimed_at FROM claims WHERE request_id = ANY($1::text[]);

-- name: claims_seen_by
SELECT c.request_id, c.claimed_by, c.claimed_at FROM claims c JOIN requests r ON r.id = c.request_id
WHERE c.request_id = ANY($1::text[]) AND (r.recipient = $2 OR r.requester = $2 OR r.recipient = ANY($3::text[]));

-- name: view_request
WITH viewed AS (
    INSERT INTO views (request_id, viewer, viewed_at) SELECT id, $2, $3 FROM requests WHERE id = $1
    ON CONFLICT DO NOTHING
    RETURNING request_id
)
INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
SELECT 'viewed', r.id, $3, json_build_object('by', $2::text), r.recipient, r.requester, r.session, r.run
FROM requests r JOIN viewed v ON v.request_id = r.id
RETURNING id;

-- name: get_setting
SELECT value::text FROM settings WHERE name = $1;

-- name: put_setting
INSERT INTO settings (name, value, updated_at) VALUES ($1, $2::jsonb, $3)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;

-- name: principal_kind
SELECT kind FROM principals WHERE name = $1;

-- name: delete_expired_link_uses
DELETE FROM answer_link_uses WHERE expires_at <= $1;

-- name: insert_link_use
INSERT INTO answer_link_uses (link, request_id, used_by, used_at, expires_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (link) DO NOTHING
RETURNING link;

-- name: get_link_use
SELECT link, request_id, used_by, used_at FROM answer_link_uses WHERE link = $1;

-- name: keep_key_fingerprint
INSERT INTO secret_key_fingerprint (fingerprint, recorded_at) VALUES ($1, $2)
ON CONFLICT (one) DO NOTHING;

-- name: get_key_fingerprint
SELECT fingerprint FROM secret_key_fingerprint;

-- name: put_key_fingerprint
INSERT INTO secret_key_fingerprint (fingerprint, recorded_at) VALUES ($1, $2)
ON CONFLICT (one) DO UPDATE SET fingerprint = excluded.fingerprint, recorded_at = excluded.recorded_at;

-- name: forget_key_fingerprint
DELETE FROM secret_key_fingerprint;

-- name: keep_grant_key_id
INSERT INTO grant_key_id (kid, derived, recorded_at) VALUES ($1, $2, $3)
ON CONFLICT (one) DO NOTHING;

-- name: get_grant_key_id
SELECT kid, derived FROM grant_key_id;

-- name: put_grant_key_id
INSERT INTO grant_key_id (kid, derived, recorded_at) VALUES ($1, $2, $3)
ON CONFLICT (one) DO UPDATE SET kid = excluded.kid, derived = excluded.derived, recorded_at = excluded.recorded_at;

-- name: forget_grant_key_id
DELETE FROM grant_key_id;
