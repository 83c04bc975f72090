-- Nothing is decided in the name of a person `token revoke` cut off (every token of theirs
-- revoked, none live): an answer or a refusal recorded as theirs (`settled_by`), or an
-- answer naming nobody that issues grants as its recipient's, is refused by the settlement's
-- own statement, in its transaction. A revocation committed first is never overtaken by an
-- answer checked before it, and the answer costs no read of its own. The store reports the
-- refusal as `Forbidden` (`principals.refused_cut_off`).
CREATE TRIGGER requests_refuse_cut_off BEFORE UPDATE OF status ON requests
WHEN OLD.status = 'pending' AND NEW.status IN ('answered', 'rejected')
    AND coalesce(NEW.settled_by, json_extract(NEW.response, '$.grants[0].issuer')) IS NOT NULL
    AND EXISTS (
        SELECT 1 FROM tokens
        WHERE principal = coalesce(NEW.settled_by, json_extract(NEW.response, '$.grants[0].issuer'))
          AND NOT for_session
    )
    AND NOT EXISTS (
        SELECT 1 FROM tokens
        WHERE principal = coalesce(NEW.settled_by, json_extract(NEW.response, '$.grants[0].issuer'))
          AND NOT for_session AND revoked_at IS NULL
    )
BEGIN
    SELECT RAISE(ABORT, 'interlock_cut_off');
END;
