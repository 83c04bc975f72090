-- A run running in its agent's own process (no worker holds it) has a deadline now, as a
-- parked run has: given up as abandoned once its process has shown no sign of life (parked
-- it, or started it again) for as long as a pause waits on a person. A run left running
-- before this version had none: it gets the default pause timeout (14 days), or its longer
-- max_duration, from now, so no process still working on one loses it at the upgrade.
UPDATE runs
SET expires_at = least(
    now() + greatest(interval '14 days', least(coalesce(max_duration, 0), 1e11) * interval '1 second'),
    '9999-12-31 23:59:59+00'::timestamptz
)
WHERE status = 'running' AND worker IS NULL AND expires_at IS NULL;
