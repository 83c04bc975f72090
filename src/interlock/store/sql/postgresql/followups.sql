-- The follow-up queue's statements (the `followups` table; see its migration).

-- name: lock_run_hold
SELECT status, worker FROM runs WHERE id = $1 FOR UPDATE;

-- name: count_held_followups
SELECT count(*) FROM followups WHERE run_id = $1 AND state = 'queued';

-- name: insert_followup
INSERT INTO followups (id, run_id, text, sender, queued_at) VALUES ($1, $2, $3, $4, $5);

-- name: held_followups
SELECT id, run_id, text, sender, queued_at FROM followups
WHERE run_id = $1 AND state = 'queued' ORDER BY queued_at, id;

-- name: followups_to_take
-- At a turn boundary: who holds the run, and whether any message waits for it (one read).
SELECT r.status, r.worker, EXISTS (SELECT 1 FROM followups f WHERE f.run_id = r.id AND f.state = 'queued')
FROM runs r WHERE r.id = $1;

-- name: finish_followup
UPDATE followups SET state = $1, done_at = $2 WHERE id = $3 AND run_id = $4 AND state = 'queued'
RETURNING id, run_id, text, sender, queued_at;

-- name: deliver_followups
UPDATE followups SET state = 'delivered', done_at = $1 WHERE run_id = $2 AND state = 'queued'
RETURNING id, run_id, text, sender, queued_at;

-- name: followup_events
-- One statement for every event of a change, its transaction's last (see `events`).
INSERT INTO events (type, at, data, recipient, requester, session, run)
SELECT $1, $2, d.data, d.data->>'by', r.requester, r.session, r.id
FROM runs r, unnest($4::json[]) WITH ORDINALITY AS d(data, n)
WHERE r.id = $3 ORDER BY d.n;
