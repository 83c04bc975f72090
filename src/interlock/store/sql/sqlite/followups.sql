-- The follow-up queue's statements (the `followups` table; see its migration).

-- name: count_held_followups
SELECT count(*) FROM followups WHERE run_id = :run AND state = 'queued';

-- name: insert_followup
INSERT INTO followups (id, run_id, text, sender, queued_at) VALUES (:id, :run, :text, :sender, :queued_at);

-- name: held_followups
SELECT id, run_id, text, sender, queued_at FROM followups
WHERE run_id = :run AND state = 'queued' ORDER BY queued_at, id;

-- name: followups_to_take
-- At a turn boundary: who holds the run, and whether any message waits for it (one read).
SELECT r.status, r.worker, EXISTS (SELECT 1 FROM followups f WHERE f.run_id = r.id AND f.state = 'queued')
FROM runs r WHERE r.id = :run;

-- name: finish_followup
UPDATE followups SET state = :state, done_at = :at WHERE id = :id AND run_id = :run AND state = 'queued'
RETURNING id, run_id, text, sender, queued_at;

-- name: deliver_followups
UPDATE followups SET state = 'delivered', done_at = :at WHERE run_id = :run AND state = 'queued'
RETURNING id, run_id, text, sender, queued_at;
