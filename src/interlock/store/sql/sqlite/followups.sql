-- The follow-up queue's statements (the `followups` table; see its migration).

-- name: count_held_followups
SELECT count(*) FROM followups WHERE run_id = :run AND state = 'queued';

-- name: insert_followup
INSERT INTO followups (id, run_id, text, sender, queued_at) VALUES (:id, :run, :text, :sender, :queued_at);

-- name: held_followups
SELECT id, run_id, text, sender, queued_at FROM followups
WHERE run_id = :run AND state = 'queued' ORDER BY queued_at, id;

-- name: held_followup
SELECT id, run_id, text, sender, queued_at FROM followups WHERE id = :id AND run_id = :run AND state = 'queued';

-- name: finish_followup
UPDATE followups SET state = :state, done_at = :at WHERE id = :id AND state = 'queued';
