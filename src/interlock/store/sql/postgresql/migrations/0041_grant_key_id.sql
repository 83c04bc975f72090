-- The public id of the key the nodes on this store sign grant tokens with: its kid (a hash
-- of the Ed25519 public key, named in every token and served at /api/v1/grants/keys), never
-- the private key; and whether the key is derived from INTERLOCK_SECRET_KEY or given in a
-- --grant-key file. Recorded by the first node with a stable grant key; a node whose key
-- has another id, or that makes one at start, refuses to start. A database from before
-- records none: the first node started on this version records its own.
CREATE TABLE grant_key_id (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    kid         text NOT NULL,
    derived     boolean NOT NULL,
    recorded_at timestamptz NOT NULL
);

-- Written by the stores: guarded like every such table (0038).
CREATE TRIGGER refuse_unknown_schema BEFORE INSERT OR UPDATE OR DELETE ON grant_key_id
    FOR EACH STATEMENT EXECUTE FUNCTION interlock_refuse_unknown_schema();
