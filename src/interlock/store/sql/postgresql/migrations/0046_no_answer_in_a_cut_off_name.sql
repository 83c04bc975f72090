-- Nothing is decided in the name of a person `token revoke` cut off (every token of theirs
-- revoked, none live): an answer or a refusal recorded as theirs (the response's `by`), or
-- an answer naming nobody that issues grants as its recipient's, is refused inside the
-- settlement's own statement. A revocation committed first is never overtaken by an answer
-- checked before it, and the answer costs no round trip of its own. The store reports the
-- refusal as `Forbidden` (`principals.refused_cut_off`).
CREATE FUNCTION interlock_refuse_cut_off() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_name text := coalesce(NEW.response ->> 'by', NEW.response -> 'grants' -> 0 ->> 'issuer');
BEGIN
    IF v_name IS NOT NULL
       AND EXISTS (SELECT 1 FROM tokens WHERE principal = v_name AND NOT for_session)
       AND NOT EXISTS (SELECT 1 FROM tokens WHERE principal = v_name AND NOT for_session AND revoked_at IS NULL) THEN
        RAISE EXCEPTION 'interlock_cut_off' USING DETAIL = v_name;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER requests_refuse_cut_off BEFORE UPDATE OF status ON requests
FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status IN ('answered', 'rejected'))
EXECUTE FUNCTION interlock_refuse_cut_off();
