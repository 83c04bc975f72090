-- name: insert_new_request
-- A new request's row and its `created` event, in one statement (see migration 0021).
INSERT INTO new_requests (id, kind, status, recipient, requester, session, channel, agent, run,
                          idempotency_key, created_at, expires_at, doc)
VALUES (:id, :kind, :status, :recipient, :requester, :session, :channel, :agent, :run,
        :idempotency_key, :created_at, :expires_at, :doc);

-- name: insert_new_request_known
-- `insert_new_request` as a statement of its own (no BEGIN before it), refused when a
-- migration newer than `:known`, the newest this process knows, is applied: another
-- process of a later version has migrated the file since this one opened it. Checked in
-- the statement's own transaction (a migration commits with its `interlock_migrations`
-- row), so it writes on the schema it knows or not at all. `interlock_refuse_write()`
-- (`SqliteStore._open`) fails the statement; a row of values has no WHERE of its own,
-- and an INSERT ... SELECT into the view would go through a temporary table.
INSERT INTO new_requests (id, kind, status, recipient, requester, session, channel, agent, run,
                          idempotency_key, created_at, expires_at, doc)
VALUES (CASE WHEN EXISTS (SELECT 1 FROM interlock_migrations WHERE version > :known)
             THEN interlock_refuse_write() ELSE :id END,
        :kind, :status, :recipient, :requester, :session, :channel, :agent, :run,
        :idempotency_key, :created_at, :expires_at, :doc);

-- name: insert_event
INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
VALUES (:type, :request_id, :at, :data, :recipient, :requester, :session, :run);

-- name: insert_request_event
INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
SELECT :type, id, :at, NULL, recipient, requester, session, run FROM requests WHERE id = :id;

-- name: is_closed
SELECT 1 FROM closed_channels WHERE channel = :channel AND requester IN ('', :requester);

-- name: insert_closed_channel
INSERT INTO closed_channels (channel, requester, closed_at) VALUES (:channel, :requester, :closed_at)
ON CONFLICT (channel, requester) DO NOTHING;

-- name: reopen_channel
DELETE FROM closed_channels WHERE channel = :channel;

-- name: reopen_channel_for
DELETE FROM closed_channels WHERE channel = :channel AND requester = :requester;

-- name: pending_in_channel_for
SELECT status, doc, response FROM requests WHERE status = 'pending' AND channel = :channel AND requester = :requester;

-- name: settle_row
-- Settle a request still pending; a trigger appends the settlement's event (migration 0021).
UPDATE requests SET status = :status, settled_at = :settled_at, response = :response, settled_by = :settled_by
WHERE id = :id AND status = 'pending';

-- name: settle_row_known
-- `settle_row` as a statement of its own, refused as `insert_new_request_known` is.
UPDATE requests SET status = CASE WHEN EXISTS (SELECT 1 FROM interlock_migrations WHERE version > :known)
                                  THEN interlock_refuse_write() ELSE :status END,
                    settled_at = :settled_at, response = :response, settled_by = :settled_by
WHERE id = :id AND status = 'pending';

-- name: newest_migration
SELECT max(version) FROM interlock_migrations;

-- name: migrations_after
SELECT version, name FROM interlock_migrations WHERE version > :known ORDER BY version;

-- name: get_request
SELECT status, doc, response FROM requests WHERE id = :id;

-- name: get_requests
SELECT id, status, doc, response FROM requests WHERE id IN (SELECT value FROM json_each(:ids));

-- name: get_status
SELECT status FROM requests WHERE id = :id;

-- name: find_idempotent
SELECT status, doc, response FROM requests WHERE ifnull(requester, '') = :requester AND idempotency_key = :key;

-- name: pending_in_channel
SELECT status, doc, response FROM requests WHERE status = 'pending' AND channel = :channel;

-- name: pending_all
SELECT status, doc, response FROM requests WHERE status = 'pending';

-- name: pending_due
-- The overdue pending requests, the longest overdue first, a chunk at a time (`:most`).
SELECT status, doc, response FROM requests WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= :due
ORDER BY expires_at LIMIT :most;

-- name: next_expiry
SELECT min(expires_at) FROM requests WHERE status = 'pending' AND expires_at IS NOT NULL;

-- name: changes_after
SELECT id, type, request_id FROM events WHERE id > :after ORDER BY id LIMIT :limit;

-- name: last_event_id
SELECT ifnull(max(id), 0) FROM events;

-- name: upsert_principal
INSERT INTO principals (name, kind, owner, created_at) VALUES (:name, :kind, :owner, :created_at)
ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, owner = excluded.owner;

-- name: get_principal
SELECT name, kind, owner FROM principals WHERE name = :name
UNION ALL SELECT name, 'team', NULL FROM teams WHERE name = :name;

-- name: list_principals
SELECT name, kind, owner FROM principals UNION ALL SELECT name, 'team', NULL FROM teams ORDER BY name;

-- name: insert_token
INSERT INTO tokens (id, hash, principal, created_at, for_session)
VALUES (:id, :hash, :principal, :created_at, :for_session);

-- name: list_tokens
SELECT id, principal, created_at, for_session FROM tokens WHERE revoked_at IS NULL ORDER BY principal, created_at, id;

-- name: tokens_all_revoked
SELECT EXISTS (SELECT 1 FROM tokens WHERE principal = :principal AND NOT for_session)
   AND NOT EXISTS (SELECT 1 FROM tokens WHERE principal = :principal AND NOT for_session AND revoked_at IS NULL);

-- name: cut_off
SELECT principal FROM tokens WHERE principal IN (SELECT value FROM json_each(:names)) AND NOT for_session
GROUP BY principal HAVING COUNT(revoked_at) = COUNT(*);

-- name: principal_for_token
SELECT p.name, p.kind, p.owner FROM tokens t JOIN principals p ON p.name = t.principal
WHERE t.hash = :hash AND t.revoked_at IS NULL;

-- name: revoke_token
UPDATE tokens SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL;

-- name: revoke_principal_tokens
UPDATE tokens SET revoked_at = :now WHERE principal = :principal AND revoked_at IS NULL;

-- name: has_principals
SELECT EXISTS (SELECT 1 FROM principals);

-- name: consume_request
UPDATE requests SET consumed_at = :at, consumed_by = :by
WHERE id = :id AND status = 'answered' AND consumed_at IS NULL;

-- name: release_request
UPDATE requests SET released_at = :at
WHERE id = :id AND released_at IS NULL AND (status = 'pending' OR json_extract(doc, '$.detached') = 1);

-- name: live_token
SELECT t.id, p.name, p.kind, p.owner FROM tokens t JOIN principals p ON p.name = t.principal
WHERE t.hash = :hash AND t.revoked_at IS NULL;

-- name: live_tokens_by_id
SELECT id, principal FROM tokens WHERE id = :id AND revoked_at IS NULL;

-- name: live_tokens_by_principal
SELECT id, principal FROM tokens WHERE principal = :principal AND revoked_at IS NULL ORDER BY id;

-- name: end_token_sessions
DELETE FROM sessions WHERE token = :token;

-- name: delete_expired_sessions
DELETE FROM sessions WHERE expires_at <= :now RETURNING token;

-- name: delete_session_token
DELETE FROM tokens
WHERE id = :token AND for_session = 1 AND NOT EXISTS (SELECT 1 FROM sessions WHERE token = :token);

-- name: insert_session
INSERT INTO sessions (hash, id, token, csrf, created_at, expires_at)
SELECT :hash, :id, t.id, :csrf, :created_at, :expires_at FROM tokens t
WHERE t.hash = :token_hash AND t.revoked_at IS NULL;

-- name: get_session
SELECT s.id, p.name, p.kind, p.owner, s.token, s.csrf, s.expires_at
FROM sessions s JOIN tokens t ON t.id = s.token JOIN principals p ON p.name = t.principal
WHERE s.hash = :hash AND s.expires_at > :now AND t.revoked_at IS NULL;

-- name: delete_session
DELETE FROM sessions WHERE hash = :hash RETURNING token;

-- name: insert_run
INSERT INTO runs (id, agent, session, requester, status, max_duration, created_at, updated_at, expires_at)
VALUES (:id, :agent, :session, :requester, :status, :max_duration, :created_at, :updated_at, :expires_at)
ON CONFLICT (id) DO NOTHING
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: insert_sole_run
-- A run that holds its session (`exclusive`): stored only if no run of its agent and
-- requester on that session has not ended. The writer holds the whole file, so the look
-- and the insert are one step; no row when a run of this id, or such a run, is stored.
INSERT INTO runs (id, agent, session, requester, status, max_duration, created_at, updated_at, expires_at, sole)
SELECT :id, :agent, :session, :requester, :status, :max_duration, :created_at, :updated_at, :expires_at, 1
WHERE NOT EXISTS (
    SELECT 1 FROM runs
    WHERE session = :session AND agent = :agent AND coalesce(requester, '') = coalesce(:requester, '')
      AND status IN ('running', 'waiting_for_input', 'waiting_for_approval')
)
ON CONFLICT DO NOTHING
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: unended_run_on_session
-- The newest run of an agent and requester on a session that has not ended (what an
-- exclusive start met). Read from `runs_unended_by_session` (migration 0037), as the look
-- of `insert_sole_run` is: one entry, whatever the session's history. Its status list is
-- the index's, word for word, so that the planner may read that index.
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM runs
WHERE session = :session AND agent = :agent AND coalesce(requester, '') = coalesce(:requester, '')
  AND status IN ('running', 'waiting_for_input', 'waiting_for_approval')
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: insert_parked_run
-- A run started parked on new requests: stored in its parked state at once (none of its
-- requests is settled yet, so it is not ready unless it waits on none).
INSERT INTO runs (id, agent, session, requester, status, max_duration, created_at, updated_at,
                  state, waiting_on, expires_at, ready)
VALUES (:id, :agent, :session, :requester, :status, :max_duration, :created_at, :updated_at,
        :state, :ids, :expires_at, :ids = '[]')
ON CONFLICT (id) DO NOTHING
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: restart_run
-- A running run no worker holds, started again by its process: a new deadline. No row
-- for any other run (parked, claimed by a worker, ended).
UPDATE runs SET expires_at = :expires_at
WHERE id = :id AND status = 'running' AND worker IS NULL
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: get_run
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM runs WHERE id = :id;

-- name: lock_run
-- The run a write goes on with: the writer holds the whole database, so it stays as read.
SELECT id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
       attempts, max_duration, created_at, updated_at, waiting_on, state, result, error
FROM runs WHERE id = :id;

-- name: park_run
-- Park a running run held by :worker (when null, one no worker holds) and say whether it is
-- ready already (none of its requests pending); no row when it is not running or another
-- worker holds it.
UPDATE runs SET status = :status, state = :state, waiting_on = :ids, expires_at = :expires_at,
    updated_at = :at, worker = NULL, lease_expires_at = NULL,
    ready = NOT EXISTS (SELECT 1 FROM requests WHERE status = 'pending' AND id IN (SELECT value FROM json_each(:ids)))
WHERE id = :id AND status = 'running' AND worker IS :worker
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: claim_found_run
-- Claim the run found ready (or lapsed) if it still is: no row when another worker took it first.
UPDATE runs SET status = 'running', ready = 0, expires_at = NULL, worker = :worker,
    lease_expires_at = :lease_expires_at, attempts = attempts + 1, updated_at = :at
WHERE id = :id
  AND ((ready = 1 AND status IN ('waiting_for_input', 'waiting_for_approval'))
       OR (status = 'running' AND lease_expires_at IS NOT NULL AND lease_expires_at <= :at))
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: claim_settled_run
-- Hand the run of a request just settled, if that made it ready, to a waiting worker.
UPDATE runs SET status = 'running', ready = 0, expires_at = NULL, worker = :worker,
    lease_expires_at = :lease_expires_at, attempts = attempts + 1, updated_at = :at
WHERE id = :id AND ready = 1 AND status IN ('waiting_for_input', 'waiting_for_approval')
  AND (:agents IS NULL OR agent IN (SELECT value FROM json_each(:agents)))
  AND (:requester IS NULL OR requester = :requester)
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: find_run
-- A ready run, else one whose worker's lease ran out: one statement for an idle worker's look.
SELECT id FROM (SELECT id FROM runs INDEXED BY runs_ready
                WHERE ready = 1 AND status IN ('waiting_for_input', 'waiting_for_approval')
                  AND (:requester IS NULL OR requester = :requester)
                ORDER BY updated_at LIMIT 1)
UNION ALL
SELECT id FROM (SELECT id FROM runs INDEXED BY runs_leased
                WHERE status = 'running' AND lease_expires_at IS NOT NULL AND lease_expires_at <= :at
                  AND (:requester IS NULL OR requester = :requester)
                ORDER BY lease_expires_at LIMIT 1)
LIMIT 1;

-- name: find_run_of
SELECT id FROM (SELECT id FROM runs INDEXED BY runs_ready
                WHERE ready = 1 AND status IN ('waiting_for_input', 'waiting_for_approval')
                  AND agent IN (SELECT value FROM json_each(:agents))
                  AND (:requester IS NULL OR requester = :requester)
                ORDER BY updated_at LIMIT 1)
UNION ALL
SELECT id FROM (SELECT id FROM runs INDEXED BY runs_leased
                WHERE status = 'running' AND lease_expires_at IS NOT NULL AND lease_expires_at <= :at
                  AND agent IN (SELECT value FROM json_each(:agents))
                  AND (:requester IS NULL OR requester = :requester)
                ORDER BY lease_expires_at LIMIT 1)
LIMIT 1;

-- name: finish_run
-- End a run with nothing to withdraw: a running one held by :worker (when null, one no
-- worker holds: an agent does not end a run under the worker resuming it); cancelling it
-- without :worker, any run not ended. No row when it may not end.
UPDATE runs SET status = :status, result = :result, error = :error, terminal_reason = :terminal_reason,
    updated_at = :at, expires_at = NULL, ready = 0, worker = NULL, lease_expires_at = NULL
WHERE id = :id AND status NOT IN ('completed', 'failed', 'cancelled')
  AND ((:worker IS NULL AND :status = 'cancelled') OR (status = 'running' AND worker IS :worker))
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: renew_lease
UPDATE runs SET lease_expires_at = :lease_expires_at
WHERE id = :id AND status = 'running' AND worker = :worker;

-- name: end_run
UPDATE runs SET status = :status, result = :result, error = :error, terminal_reason = :terminal_reason,
    updated_at = :at, expires_at = NULL, ready = 0, worker = NULL, lease_expires_at = NULL
WHERE id = :id
RETURNING id, agent, session, requester, status, terminal_reason, ready, worker, lease_expires_at, expires_at,
          attempts, max_duration, created_at, updated_at, waiting_on, state, result, error;

-- name: pending_of_run
SELECT status, doc, response FROM requests WHERE run = :id AND status = 'pending' ORDER BY id;

-- name: any_pending_of_run
SELECT 1 FROM requests WHERE run = :id AND status = 'pending' LIMIT 1;

-- name: runs_due
-- Runs past their deadline: parked on a person (not ready), or running held by no worker
-- (a worker's claim has none: its lease hands it on); whether it is the latter.
SELECT id, status = 'running' FROM runs WHERE expires_at IS NOT NULL AND expires_at <= :due
  AND ((status IN ('waiting_for_input', 'waiting_for_approval') AND ready = 0)
       OR (status = 'running' AND worker IS NULL))
ORDER BY expires_at LIMIT 100;

-- name: next_run_expiry
-- A ready run (every request settled) is not abandoned: it waits for a worker, not a person.
-- (A run has a deadline only while parked or running held by no worker.)
SELECT min(expires_at) FROM runs WHERE expires_at IS NOT NULL AND ready = 0;
-- name: insert_grant_row
INSERT INTO grants (id, resource, ability, issuer, audience, issued_at, expires_at, request_id, ask_id, option_id)
VALUES (:id, :resource, :ability, :issuer, :audience, :issued_at, :expires_at, :request_id, :ask_id, :option_id);

-- name: get_grant
SELECT id, resource, ability, issuer, audience, issued_at, expires_at, request_id, ask_id, option_id,
       revoked_at, revoked_by
FROM grants WHERE id = :id;

-- name: revoke_grant
UPDATE grants SET revoked_at = :at, revoked_by = :by WHERE id = :id AND revoked_at IS NULL
RETURNING id, resource, ability, issuer, audience, issued_at, expires_at, request_id, ask_id, option_id,
          revoked_at, revoked_by;
-- name: delete_expired_signin_links
DELETE FROM signin_links WHERE expires_at <= :now;

-- name: insert_signin_link
INSERT INTO signin_links (hash, principal, created_at, expires_at)
VALUES (:hash, :principal, :created_at, :expires_at);

-- name: use_signin_link
UPDATE signin_links SET used_at = :now
WHERE hash = :hash AND used_at IS NULL AND expires_at > :now
RETURNING principal;
-- name: unrouted_notices
SELECT id, event_id, type, request_id, recipient, at FROM outbox
WHERE routed_at IS NULL AND (lease_owner IS NULL OR lease_owner = :owner OR lease_until <= :now)
ORDER BY id LIMIT :limit;

-- name: lease_notice
UPDATE outbox SET lease_owner = :owner, lease_until = :until WHERE id = :id;

-- name: mark_routed
UPDATE outbox SET routed_at = :now, lease_owner = NULL, lease_until = NULL
WHERE id = :id AND routed_at IS NULL AND lease_owner = :owner;

-- name: insert_delivery
INSERT INTO deliveries (id, notice, request_id, kind, event, recipient, channel, address, status, attempts,
                        due_at, created_at, delivered_at, last_error, reference)
VALUES (:id, :notice, :request_id, :kind, :event, :recipient, :channel, :address, :status, :attempts,
        :due_at, :created_at, :delivered_at, :last_error, :reference)
ON CONFLICT (id) DO NOTHING;

-- name: claimable_channels
-- The channels with a delivery due that :owner may claim, and how many of theirs it may
-- (:per_channel less those it holds; NULL: :limit). The channels with pending deliveries
-- are walked from one name to the next along deliveries_pending_by_channel, a look each;
-- a channel's due one is the first of its range not leased (no more are leased than are
-- being sent), and what :owner holds is read from deliveries_leased: however many are
-- waiting in a channel, none is read but those.
WITH RECURSIVE walk(channel) AS (
    SELECT (SELECT channel FROM deliveries WHERE status = 'pending' ORDER BY channel LIMIT 1)
    UNION ALL
    SELECT (SELECT channel FROM deliveries WHERE status = 'pending' AND channel > walk.channel
            ORDER BY channel LIMIT 1)
    FROM walk WHERE walk.channel IS NOT NULL
), room(channel, room) AS (
    SELECT channel, coalesce(:per_channel - (SELECT count(*) FROM deliveries AS held
                                            WHERE held.lease_owner = :owner AND held.channel = walk.channel
                                              AND held.lease_until > :now), :limit)
    FROM walk WHERE channel IS NOT NULL
)
SELECT channel, room FROM room
WHERE room > 0 AND EXISTS (
    SELECT 1 FROM deliveries AS d
    WHERE d.status = 'pending' AND d.channel = room.channel AND d.due_at <= :now
      AND (d.lease_owner IS NULL OR d.lease_until <= :now));

-- name: due_deliveries_of
SELECT id, notice, request_id, kind, event, recipient, channel, address, status, attempts,
       due_at, created_at, delivered_at, last_error, reference FROM deliveries
WHERE status = 'pending' AND channel = :channel AND due_at <= :now AND (lease_owner IS NULL OR lease_until <= :now)
ORDER BY due_at, id LIMIT :limit;

-- name: lease_delivery
UPDATE deliveries SET lease_owner = :owner, lease_until = :until WHERE id = :id;

-- name: finish_delivery
UPDATE deliveries SET status = :status, attempts = :attempts, due_at = :due_at, delivered_at = :delivered_at,
                      last_error = :last_error, reference = :reference, lease_owner = NULL, lease_until = NULL
WHERE id = :id AND lease_owner = :owner;

-- name: get_delivery
SELECT id, notice, request_id, kind, event, recipient, channel, address, status, attempts,
       due_at, created_at, delivered_at, last_error, reference FROM deliveries WHERE id = :id;

-- name: retry_delivery
UPDATE deliveries SET status = 'pending', attempts = 0, due_at = :now, lease_owner = NULL, lease_until = NULL
WHERE id = :id AND status = 'dead';

-- name: oldest_unrouted
SELECT min(at) FROM outbox WHERE routed_at IS NULL;

-- name: next_delivery_due
-- The first entry of deliveries_due (without the hint, SQLite reads every pending one's from
-- deliveries_pending_by_channel or deliveries_by_status: a backlog's worth each time the
-- delivery loop looks).
SELECT min(due_at) FROM deliveries INDEXED BY deliveries_due WHERE status = 'pending';

-- name: put_policy
INSERT INTO approval_policies (agent, server, body, version, updated_at, updated_by)
VALUES (:agent, :server, :body, 1, :at, :by)
ON CONFLICT (agent, server) DO UPDATE
SET body = excluded.body, version = approval_policies.version + 1,
    updated_at = excluded.updated_at, updated_by = excluded.updated_by
RETURNING version;

-- name: get_policy
SELECT agent, server, body, version, updated_at, updated_by FROM approval_policies
WHERE agent = :agent AND server = :server;

-- name: list_policies
SELECT agent, server, body, version, updated_at, updated_by FROM approval_policies ORDER BY agent, server;

-- name: list_policies_of
SELECT agent, server, body, version, updated_at, updated_by FROM approval_policies
WHERE agent = :agent ORDER BY server;

-- name: delete_policy
DELETE FROM approval_policies WHERE agent = :agent AND server = :server
RETURNING agent, server, body, version, updated_at, updated_by;
-- name: get_team
SELECT name FROM teams WHERE name = :name;

-- name: list_teams
SELECT name FROM teams ORDER BY name;

-- name: insert_team
INSERT INTO teams (name, created_at) VALUES (:name, :created_at) ON CONFLICT (name) DO NOTHING;

-- name: insert_team_member
INSERT INTO team_members (team, member) VALUES (:team, :member) ON CONFLICT DO NOTHING;

-- name: delete_team_member
DELETE FROM team_members WHERE team = :team AND member = :member;

-- name: lock_team
-- A write transaction here holds the database's one write lock already.
SELECT name FROM teams WHERE name = :name;

-- name: delete_team
DELETE FROM teams WHERE name = :name;

-- name: team_members
SELECT member FROM team_members WHERE team = :team ORDER BY member;

-- name: teams_of
SELECT team FROM team_members WHERE member = :member ORDER BY team;

-- name: insert_claim
INSERT INTO claims (request_id, claimed_by, claimed_at)
SELECT id, :by, :at FROM requests WHERE id = :id AND status = 'pending'
ON CONFLICT (request_id) DO NOTHING;

-- name: get_claim
SELECT claimed_by, claimed_at FROM claims WHERE request_id = :id;

-- name: delete_claim
DELETE FROM claims WHERE request_id = :id AND (claimed_by = :by OR :by IS NULL)
    AND EXISTS (SELECT 1 FROM requests WHERE id = :id AND status = 'pending')
RETURNING claimed_by, claimed_at;

-- name: insert_request_event_data
INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
SELECT :type, id, :at, :data, recipient, requester, session, run FROM requests WHERE id = :id;

-- name: insert_view
INSERT INTO views (request_id, viewer, viewed_at) SELECT id, :by, :at FROM requests WHERE id = :id
ON CONFLICT DO NOTHING;

-- name: get_setting
SELECT value FROM settings WHERE name = :name;

-- name: put_setting
INSERT INTO settings (name, value, updated_at) VALUES (:name, :value, :at)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;

-- name: claims_of
SELECT request_id, claimed_by, claimed_at FROM claims WHERE request_id IN (SELECT value FROM json_each(:ids));

-- name: claims_seen_by
SELECT c.request_id, c.claimed_by, c.claimed_at FROM claims c JOIN requests r ON r.id = c.request_id
WHERE c.request_id IN (SELECT value FROM json_each(:ids))
    AND (r.recipient = :name OR r.requester = :name OR r.recipient IN (SELECT value FROM json_each(:teams)));

-- name: principal_kind
SELECT kind FROM principals WHERE name = :name;

-- Derived from the event log (see migration 0017): how far each is up to date.

-- name: derived_behind
SELECT d.event_id, (SELECT ifnull(max(id), 0) FROM events) FROM derived d WHERE d.name = :name;

-- name: set_derived
UPDATE derived SET event_id = :upto WHERE name = :name;

-- name: derive_notices
INSERT INTO outbox (event_id, type, request_id, recipient, at)
SELECT id, type, request_id, recipient, at FROM events
WHERE id > :after AND id <= :upto AND request_id IS NOT NULL
  AND type IN ('created', 'answered', 'rejected', 'expired', 'cancelled')
ORDER BY id;

-- name: first_underived_notice
SELECT at FROM events
WHERE id > (SELECT event_id FROM derived WHERE name = 'outbox') AND request_id IS NOT NULL
  AND type IN ('created', 'answered', 'rejected', 'expired', 'cancelled')
ORDER BY id LIMIT 1;

-- The search index: one row per request (its rowid), the texts a search reads (as
-- `store.search_texts` says, and the view `search_texts` of migration 0026 reads them),
-- and whom it is to. A request whose pending text was indexed before the events in
-- (:after, :upto] and that settled in them with a response has that text taken out (a
-- contentless index forgets a row's words when told the text they came from), then its
-- whole text put in; one created in them is put in as it is now.

-- name: unindex_settled
INSERT INTO requests_text (requests_text, rowid, body, recipient)
SELECT 'delete', t.request_rowid, t.doc_text, t.recipient
FROM search_texts t
WHERE t.request_id IN (SELECT request_id FROM events WHERE id > :after AND id <= :upto AND request_id IS NOT NULL
                         AND type IN ('answered', 'rejected', 'expired', 'cancelled'))
  AND t.settled
  AND EXISTS (SELECT 1 FROM events c WHERE c.request_id = t.request_id AND c.id <= :after AND c.type = 'created');

-- The texts of the requests the events in (:after, :upto] bring in (a request created in
-- them, as it is now; one settled in them with a response, its whole text), each read out of
-- its JSON once into `temp.texts_taken` (made by each connection when it opens, emptied
-- first), from which they go into the index and into `temp.new_texts`.

-- name: take_texts
INSERT INTO temp.texts_taken (request_rowid, body, recipient)
SELECT t.request_rowid, t.doc_text || t.response_text, t.recipient
FROM search_texts t
WHERE t.request_id IN (SELECT request_id FROM events WHERE id > :after AND id <= :upto AND request_id IS NOT NULL
                         AND type IN ('created', 'answered', 'rejected', 'expired', 'cancelled'))
  AND (t.settled
       OR NOT EXISTS (SELECT 1 FROM events c WHERE c.request_id = t.request_id AND c.id <= :after
                        AND c.type = 'created'));

-- name: index_taken_texts
INSERT INTO requests_text (rowid, body, recipient) SELECT request_rowid, body, recipient FROM temp.texts_taken;

-- The words of the texts just taken in are kept in `search_terms`: they go into
-- `temp.new_texts` too (made by each connection when it opens, with the tokenizer of
-- `requests_text`), whose vocabulary gives their words; then it is emptied.

-- name: words_of_taken_texts
INSERT INTO temp.new_texts (rowid, body, recipient) SELECT request_rowid, body, recipient FROM temp.texts_taken;

-- name: forget_taken_texts
DELETE FROM temp.texts_taken;

-- name: make_texts_taken
CREATE TEMP TABLE IF NOT EXISTS texts_taken (request_rowid INTEGER PRIMARY KEY, body TEXT, recipient TEXT);

-- name: make_new_texts
CREATE VIRTUAL TABLE IF NOT EXISTS temp.new_texts USING fts5 (
    body, recipient, tokenize = 'unicode61 remove_diacritics 2', content = '', columnsize = 0
);

-- name: make_new_terms
CREATE VIRTUAL TABLE IF NOT EXISTS temp.new_terms USING fts5vocab(temp, new_texts, col);

-- name: keep_new_terms
INSERT OR IGNORE INTO search_terms (term) SELECT term FROM temp.new_terms WHERE col = 'body';

-- name: forget_new_texts
INSERT INTO temp.new_texts (new_texts) VALUES ('delete-all');

-- name: terms_with_prefix
SELECT term FROM search_terms WHERE term >= :low AND term < :high ORDER BY term LIMIT :most;

-- name: delete_expired_link_uses
DELETE FROM answer_link_uses WHERE expires_at <= :now;

-- name: insert_link_use
INSERT INTO answer_link_uses (link, request_id, used_by, used_at, expires_at)
VALUES (:link, :request_id, :by, :at, :expires_at)
ON CONFLICT (link) DO NOTHING;

-- name: get_link_use
SELECT link, request_id, used_by, used_at FROM answer_link_uses WHERE link = :link;

-- name: keep_key_fingerprint
INSERT INTO secret_key_fingerprint (one, fingerprint, recorded_at) VALUES (1, :fingerprint, :at)
ON CONFLICT (one) DO NOTHING;

-- name: get_key_fingerprint
SELECT fingerprint FROM secret_key_fingerprint;

-- name: put_key_fingerprint
INSERT INTO secret_key_fingerprint (one, fingerprint, recorded_at) VALUES (1, :fingerprint, :at)
ON CONFLICT (one) DO UPDATE SET fingerprint = excluded.fingerprint, recorded_at = excluded.recorded_at;

-- name: forget_key_fingerprint
DELETE FROM secret_key_fingerprint;

-- name: keep_grant_key_id
INSERT INTO grant_key_id (one, kid, derived, recorded_at) VALUES (1, :kid, :derived, :at)
ON CONFLICT (one) DO NOTHING;

-- name: get_grant_key_id
SELECT kid, derived FROM grant_key_id;

-- name: put_grant_key_id
INSERT INTO grant_key_id (one, kid, derived, recorded_at) VALUES (1, :kid, :derived, :at)
ON CONFLICT (one) DO UPDATE SET kid = excluded.kid, derived = excluded.derived, recorded_at = excluded.recorded_at;

-- name: forget_grant_key_id
DELETE FROM grant_key_id;
