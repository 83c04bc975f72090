-- A park writes no `run_waits` rows. Whether a settlement makes its run ready is read from
-- the run's `waiting_on`, which holds the same ids (as on PostgreSQL since its 0021): each
-- park wrote a row of `run_waits` and an entry of its index, and each park after a resume
-- deleted the earlier ones first, to say what `waiting_on` says already.

DROP TRIGGER runs_ready_on_settle;
DROP TABLE run_waits;

-- A request of a run settling makes its parked run ready when none of the requests it
-- waits on is pending any more: in the settling transaction itself, on every process.
CREATE TRIGGER runs_ready_on_settle AFTER UPDATE OF status ON requests
WHEN OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.run IS NOT NULL
BEGIN
    UPDATE runs SET ready = 1
    WHERE id = NEW.run
      AND status IN ('waiting_for_input', 'waiting_for_approval')
      AND ready = 0
      AND EXISTS (SELECT 1 FROM json_each(runs.waiting_on) w WHERE w.value = NEW.id)
      AND NOT EXISTS (
          SELECT 1 FROM json_each(runs.waiting_on) w JOIN requests r ON r.id = w.value
          WHERE r.status = 'pending'
      );
END;
