-- Why: the internal API must not be usable by whoever reaches its port (invariant 10). Each
-- client (an app backend, Prometheus, an operator) holds a key of its own: the database
-- keeps only a hash of it, what it may do (scopes) and whether it was revoked. Requests and
-- idempotency keys are attributed to the client that made them, so two clients reusing one
-- Idempotency-Key never collide, and limits can be counted per client.

CREATE DOMAIN notifier.api_scope AS text CHECK (VALUE IN ('request', 'read', 'admin', 'metrics'));

CREATE TABLE notifier.api_keys (
    -- The public part of the key ("nfk_<id>_<secret>"), shown in listings and logs.
    id              text        PRIMARY KEY CHECK (id ~ '^[0-9a-f]{12}$'),
    name            text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    scopes          notifier.api_scope[] NOT NULL CHECK (cardinality(scopes) >= 1),
    -- SHA-256 of the whole key. The secret carries 256 random bits, so a plain hash is as
    -- hard to reverse as the secret is to guess; a slow hash would only slow every request.
    secret_hash     bytea       NOT NULL CHECK (length(secret_hash) = 32),
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_used_at    timestamptz,
    revoked_at      timestamptz
);

-- The client that requested a verification: an API key's id, or NULL for the library call
-- (the application's own code, trusted through its database connection).
ALTER TABLE notifier.verifications ADD COLUMN client_id text;

-- An Idempotency-Key is unique per client, not across clients.
DROP INDEX notifier.verifications_idempotency_key_key;
CREATE UNIQUE INDEX verifications_client_idempotency_key_key
    ON notifier.verifications ((coalesce(client_id, '')), idempotency_key)
    WHERE idempotency_key IS NOT NULL;
