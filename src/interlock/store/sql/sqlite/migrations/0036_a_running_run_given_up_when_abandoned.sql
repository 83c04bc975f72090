-- A run running in its agent's own process (no worker holds it) has a deadline now, as a
-- parked run has: given up as abandoned once its process has shown no sign of life (parked
-- it, or started it again) for as long as a pause waits on a person. A run left running
-- before this version had none: it gets the default pause timeout (14 days), or its longer
-- max_duration, from now, so no process still working on one loses it at the upgrade.
UPDATE runs
SET expires_at = min(
    CAST(strftime('%s', 'now') AS INTEGER) * 1000000
        + CAST(max(1209600.0, coalesce(max_duration, 0.0)) * 1000000 AS INTEGER),
    253402300799999999
)
WHERE status = 'running' AND worker IS NULL AND expires_at IS NULL;
