-- Why: nothing held the fleet to the provider's rate. Each worker sent as fast as it could,
-- so three workers against a 14/s SES account were throttled by design, and a per-process
-- limit cannot add up to the account's. NOTIFIER_SEND_RATE is now one token bucket in the
-- database, on its clock, that every worker draws from before it claims (so no lease is
-- held waiting for a token), and that halves when the provider throttles and grows back a
-- little every second (additive increase, multiplicative decrease): the fleet settles under
-- the provider's real limit. A daily quota (NOTIFIER_DAILY_QUOTA) is counted in the same
-- row, and a provider's "daily quota exceeded" pauses every worker until the day rolls over.

-- One row: the rate in force (the configured one, or less after a throttle; Infinity when
-- only a quota or a pause is kept), the tokens left and when they were counted, the UTC
-- day's sends against NOTIFIER_DAILY_QUOTA, and a pause the provider's spent daily quota
-- asked for.
CREATE TABLE notifier.send_rate (
    id            boolean          PRIMARY KEY DEFAULT true CHECK (id),
    rate          double precision NOT NULL CHECK (rate > 0),
    tokens        double precision NOT NULL,
    refilled_at   timestamptz      NOT NULL DEFAULT clock_timestamp(),
    backed_off_at timestamptz,
    day           date,
    sent_today    integer          NOT NULL DEFAULT 0 CHECK (sent_today >= 0),
    paused_until  timestamptz
);

-- Up to p_wanted tokens. With p_rate (NOTIFIER_SEND_RATE): the bucket refills at the rate
-- in force, which grows back by p_recovery messages a second every second since a throttle,
-- and holds a quarter second of it (at least one), so no second sends more than the rate
-- and a quarter. With p_daily_quota: no more than that many in a UTC day. Nothing while a
-- pause holds. wait: seconds until a token is worth asking for again, when fewer were
-- granted. The database's clock decides, never a worker's; the row lock orders every taker.
CREATE FUNCTION notifier.take_send_tokens_v1(
    p_wanted integer, p_rate double precision, p_recovery double precision,
    p_daily_quota integer
) RETURNS TABLE (
    granted integer, rate double precision, wait double precision, paused_until timestamptz
)
LANGUAGE plpgsql AS $$
DECLARE
    r notifier.send_rate;
    at timestamptz := clock_timestamp();
    today date;
    sent integer;
    elapsed double precision;
    in_force double precision := 'Infinity';
    have double precision := 0;
    given integer := p_wanted;
    waited double precision := 0;
BEGIN
    INSERT INTO notifier.send_rate (rate, tokens, refilled_at)
    VALUES (coalesce(p_rate, 'Infinity'), 0, at)
    ON CONFLICT (id) DO NOTHING;
    SELECT * INTO r FROM notifier.send_rate s WHERE s.id FOR UPDATE;
    at := clock_timestamp();  -- after the lock: the time this taker's tokens are counted at
    IF r.paused_until > at THEN
        RETURN QUERY SELECT 0, r.rate, extract(epoch FROM r.paused_until - at)::float8,
                            r.paused_until;
        RETURN;
    END IF;
    today := (at AT TIME ZONE 'UTC')::date;
    sent := CASE WHEN r.day = today THEN r.sent_today ELSE 0 END;
    IF p_rate IS NOT NULL THEN
        elapsed := greatest(extract(epoch FROM at - r.refilled_at), 0);
        in_force := least(p_rate, r.rate + p_recovery * elapsed);
        have := least(greatest(1, in_force / 4), r.tokens + in_force * elapsed);
        given := least(p_wanted, greatest(floor(have), 0))::integer;
        IF given < p_wanted THEN
            waited := (1 - (have - given)) / in_force;
        END IF;
    END IF;
    IF p_daily_quota IS NOT NULL AND sent + given >= p_daily_quota THEN
        given := greatest(p_daily_quota - sent, 0);
        IF given < p_wanted THEN
            waited := extract(epoch FROM ((today + 1)::timestamp AT TIME ZONE 'UTC') - at);
        END IF;
    END IF;
    UPDATE notifier.send_rate s
    SET rate = in_force, tokens = have - least(given, have), refilled_at = at, day = today,
        sent_today = sent + given, paused_until = NULL
    WHERE s.id;
    RETURN QUERY SELECT given, in_force, waited, NULL::timestamptz;
END;
$$;

-- Tokens taken but not spent (the rows were claimed by another worker, or settled without
-- sending) go back, up to what the bucket holds, and out of the day's count.
CREATE FUNCTION notifier.return_send_tokens_v1(p_count integer) RETURNS void
LANGUAGE sql AS $$
    UPDATE notifier.send_rate s
    SET tokens = least(greatest(1, s.rate / 4), s.tokens + p_count),
        sent_today = greatest(s.sent_today - p_count, 0)
    WHERE s.id
$$;

-- The provider throttled a send: the rate in force halves, at most once a second (a burst
-- throttles many sends at once, and they are one signal), never below p_floor. The rate
-- in force afterwards.
CREATE FUNCTION notifier.send_rate_throttled_v1(p_floor double precision)
RETURNS double precision
LANGUAGE sql AS $$
    UPDATE notifier.send_rate s
    SET rate = greatest(p_floor, s.rate / 2), tokens = least(s.tokens, 0),
        backed_off_at = clock_timestamp()
    WHERE s.id AND (s.backed_off_at IS NULL
                    OR s.backed_off_at < clock_timestamp() - interval '1 second')
    RETURNING s.rate
$$;

-- The provider said its daily quota is spent: every worker stops taking tokens until the
-- UTC day rolls over (the window NOTIFIER_DAILY_QUOTA counts in). When the pause ends.
CREATE FUNCTION notifier.send_paused_v1() RETURNS timestamptz
LANGUAGE sql AS $$
    INSERT INTO notifier.send_rate AS s (rate, tokens, paused_until)
    VALUES ('Infinity', 0,
            (((clock_timestamp() AT TIME ZONE 'UTC')::date + 1)::timestamp AT TIME ZONE 'UTC'))
    ON CONFLICT (id) DO UPDATE SET paused_until = excluded.paused_until
    RETURNING s.paused_until
$$;
