-- Why: in production notifier hands mail to a relay (SES, Postmark, the company's Postfix),
-- which answers 250 to almost everything and learns the truth later: the recipient's server
-- refuses the mailbox minutes afterwards and a delivery status notification (RFC 3464)
-- comes back to the envelope sender, or a person presses "this is spam" and a feedback
-- report (ARF) comes back. notifier ignored both: the delivery stayed `sent`, the mailbox
-- was never suppressed and the app never heard. Reports mailed to a delivery's own return
-- path (notifier.verp) are now kept, once each, and acted on:
-- 1. a permanent bounce of a sent delivery makes it `bounced` (a terminal state after
--    `sent`), writes email.bounced and verification.failed (reason bounced), and suppresses
--    the address when the recipient's own mailbox refused it (the caller decides, by the
--    rules a refusal at RCPT is judged by: a 5.7.x policy bounce alerts the operator);
-- 2. a complaint suppresses the address until an operator clears it (email.complained);
-- 3. anything else (a transient or undetermined bounce, a delay, a delivery) is counted.

-- Every status before this release is still one: only new values need checking.
ALTER TABLE notifier.email_outbox DROP CONSTRAINT email_outbox_status_check;
ALTER TABLE notifier.email_outbox ADD CONSTRAINT email_outbox_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'expired', 'bounced')) NOT VALID;
ALTER TABLE notifier.email_outbox DROP CONSTRAINT email_outbox_completed_iff_terminal;
ALTER TABLE notifier.email_outbox ADD CONSTRAINT email_outbox_completed_iff_terminal
    CHECK ((status IN ('sent', 'failed', 'expired', 'bounced')) = (completed_at IS NOT NULL))
    NOT VALID;

CREATE TABLE notifier.delivery_reports (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id   bigint      NOT NULL REFERENCES notifier.email_outbox (id) ON DELETE CASCADE,
    -- What de-duplicates a report: its own Message-ID (and recipient block), or a digest.
    report_id   text        NOT NULL UNIQUE CHECK (length(report_id) BETWEEN 1 AND 300),
    -- notifier.reports: ReportKind, BounceType, ReportSource.
    kind        text        NOT NULL
                            CHECK (kind IN ('delivered', 'deferred', 'bounced', 'complained')),
    bounce_type text        CHECK (bounce_type IN ('permanent', 'transient', 'undetermined')),
    source      text        NOT NULL CHECK (source IN ('dsn', 'arf', 'mail', 'ses')),
    status      text        CHECK (status ~ '^[245]\.[0-9]{1,3}\.[0-9]{1,3}$'),
    -- The remote server's words, redacted, one line.
    diagnostic  text        CHECK (length(diagnostic) <= 300),
    -- What it did: bounced, suppressed, counted.
    applied     text        NOT NULL DEFAULT 'counted',
    received_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'bounced') = (bounce_type IS NOT NULL))
);
CREATE INDEX delivery_reports_outbox_idx ON notifier.delivery_reports (outbox_id, id);

-- Keeps one report and acts on it (see the header). p_suppress_key: the delivery's address
-- as suppressions key it (notifier.addresses.folded); p_suppress: a permanent bounce the
-- recipient's own mailbox caused. What it did: bounced, suppressed, counted, duplicate (the
-- same report_id again: nothing changes twice) or unknown (no such delivery).
CREATE FUNCTION notifier.apply_report_v1(
    p_outbox_id bigint, p_report_id text, p_kind text, p_bounce_type text, p_source text,
    p_status text, p_diagnostic text, p_suppress_key text, p_suppress boolean,
    p_suppression_seconds double precision
) RETURNS text
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    target record;
    done text := 'counted';
BEGIN
    SELECT o.id, o.status, o.verification_id INTO target
    FROM notifier.email_outbox o WHERE o.id = p_outbox_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    INSERT INTO notifier.delivery_reports
        (outbox_id, report_id, kind, bounce_type, source, status, diagnostic)
    VALUES (p_outbox_id, p_report_id, p_kind, p_bounce_type, p_source, p_status, p_diagnostic)
    ON CONFLICT (report_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    IF p_kind = 'bounced' AND p_bounce_type = 'permanent' THEN
        UPDATE notifier.email_outbox o
        SET status = 'bounced', updated_at = now(),
            last_error = left('the recipient''s server refused it after the relay accepted it: '
                              || concat_ws(' ', p_status, p_diagnostic), 500)
        WHERE o.id = p_outbox_id AND o.status = 'sent';
        IF FOUND THEN
            done := 'bounced';
            INSERT INTO notifier.events (type, verification_id, data)
            VALUES ('email.bounced', target.verification_id, jsonb_build_object(
                'verification_id', target.verification_id, 'bounce_type', p_bounce_type,
                'status', p_status));
        END IF;
    END IF;
    IF (p_kind = 'bounced' AND p_bounce_type = 'permanent' AND p_suppress)
       OR p_kind = 'complained' THEN
        INSERT INTO notifier.suppressed_addresses AS s
            (email, reason, smtp_code, outbox_id, expires_at)
        VALUES (p_suppress_key,
                CASE p_kind WHEN 'complained'
                    THEN 'the recipient reported it as spam (a feedback report); until cleared'
                    ELSE left('the recipient''s server refused it after the relay accepted '
                              || 'it: ' || concat_ws(' ', p_status, p_diagnostic), 500) END,
                CASE WHEN p_status IS NOT NULL THEN 550 END, p_outbox_id,
                CASE WHEN p_kind = 'complained' THEN NULL
                     ELSE now() + make_interval(secs => p_suppression_seconds) END)
        ON CONFLICT (email) DO UPDATE SET
            reason = excluded.reason, smtp_code = excluded.smtp_code,
            outbox_id = excluded.outbox_id, suppressed_at = now(),
            expires_at = excluded.expires_at;
        done := 'suppressed';
        IF p_kind = 'complained' THEN
            INSERT INTO notifier.events (type, verification_id, data)
            VALUES ('email.complained', target.verification_id, jsonb_build_object(
                'verification_id', target.verification_id,
                'email', notifier.redacted_email_v1(p_suppress_key)));
        END IF;
    END IF;
    UPDATE notifier.delivery_reports r SET applied = done WHERE r.report_id = p_report_id;
    RETURN done;
END;
$$;

-- deliveries_ended_v1 (schema 0016) with a bounce: a delivery the recipient's server refused
-- after the relay accepted it failed, and says so (reason bounced).
CREATE OR REPLACE FUNCTION notifier.deliveries_ended_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifier.events (type, verification_id, data)
    SELECT CASE n.status WHEN 'sent' THEN 'verification.sent' ELSE 'verification.failed' END,
           n.verification_id,
           notifier.verification_data_v1(v.id, v.user_id, v.purpose, v.client_id, n.status)
           || CASE n.status
                  WHEN 'sent' THEN
                      jsonb_build_object('provider_message_id', n.provider_message_id)
                  WHEN 'bounced' THEN jsonb_build_object('reason', 'bounced')
                  ELSE jsonb_build_object('reason', CASE n.last_outcome
                      WHEN 'permanent' THEN 'rejected'
                      WHEN 'unknown' THEN 'outcome_unknown'
                      ELSE 'attempts_exhausted' END)
              END
    FROM new_rows n
    JOIN old_rows o ON o.id = n.id
    JOIN notifier.verifications v ON v.id = n.verification_id
    WHERE (n.status = 'sent' AND o.status <> 'sent' AND n.last_outcome = 'sent')
       OR (n.status = 'failed' AND o.status <> 'failed')
       OR (n.status = 'bounced' AND o.status <> 'bounced');
    RETURN NULL;
END;
$$;

-- The runtime role also takes from the send rate's bucket (schema 0019) and keeps reports.
CREATE OR REPLACE FUNCTION notifier.grant_runtime_v1(runtime_role name) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    current_oid oid := (SELECT oid FROM pg_roles WHERE rolname = runtime_role);
BEGIN
    IF current_oid IS NULL THEN
        DELETE FROM notifier.runtime_roles WHERE role = runtime_role;
        RETURN;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA notifier TO %I', runtime_role);
    EXECUTE format('GRANT SELECT ON notifier.schema_migrations TO %I', runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.verifications TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON notifier.email_outbox TO %I', runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON notifier.delivery_attempts TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.suppressed_addresses TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.request_counts TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.session_sign_outs TO %I',
                   runtime_role);
    EXECUTE format('GRANT SELECT, UPDATE (last_used_at, sessions_valid_after) '
                   'ON notifier.api_keys TO %I', runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON notifier.events, '
                   'notifier.webhook_endpoints, notifier.webhook_deliveries, '
                   'notifier.webhook_attempts TO %I', runtime_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON notifier.send_rate, '
                   'notifier.delivery_reports TO %I', runtime_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA notifier TO %I', runtime_role);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name), '
                   'notifier.regrant_runtime_v1() FROM %I', runtime_role);
    INSERT INTO notifier.runtime_roles (role, role_oid) VALUES (runtime_role, current_oid)
    ON CONFLICT (role) DO UPDATE SET role_oid = excluded.role_oid, granted_at = now();
END;
$$;
REVOKE EXECUTE ON FUNCTION notifier.grant_runtime_v1(name) FROM PUBLIC;
SELECT notifier.regrant_runtime_v1();
