-- Follow-up messages: text a person sent to a run while it was busy, held until the
-- run's agent takes it at its next turn boundary (`state` 'delivered') or the person
-- withdraws it ('withdrawn'). Held rows of an ended run stay, read-only, for a client to
-- send again. A write to a run's queue locks the run's row first (`FOR UPDATE`), so a
-- message is never held past the bound nor after the run ended.
CREATE TABLE followups (
    id        text PRIMARY KEY,
    run_id    text NOT NULL,
    text      text NOT NULL,
    sender    text,
    queued_at timestamptz NOT NULL,
    state     text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'delivered', 'withdrawn')),
    done_at   timestamptz
);

CREATE INDEX followups_held ON followups (run_id, queued_at, id) WHERE state = 'queued';
