"""Switching an earlier version's pg_hba.conf from trust to the password, rule by rule."""

from __future__ import annotations

from notifier.storage.embedded import hba_trusts, hba_without_trust

# What initdb --auth=trust writes, abridged, plus a rule someone added by hand.
LEGACY_HBA = """\
# TYPE  DATABASE        USER            ADDRESS                 METHOD

# "local" is for Unix domain socket connections only
local   all             all                                     trust
# IPv4 local connections:
host    all             all             127.0.0.1/32            trust   # kept comment
host    replication     all             ::1/128                 trust
host    all             reader          10.0.0.0/8              scram-sha-256
"""
TRUST_RULES = {3, 5, 6}  # line numbers of the trust rules above


def test_every_trust_rule_asks_for_the_password_after_the_switch() -> None:
    switched = hba_without_trust(LEGACY_HBA)
    assert hba_trusts(LEGACY_HBA)
    assert not hba_trusts(switched)
    lines = switched.splitlines()
    assert (
        lines[3] == "local   all             all                                     scram-sha-256"
    )
    assert lines[5].endswith("127.0.0.1/32            scram-sha-256   # kept comment")


def test_comments_and_other_rules_are_kept_as_they_were() -> None:
    before = LEGACY_HBA.splitlines()
    after = hba_without_trust(LEGACY_HBA).splitlines()
    assert len(after) == len(before)
    assert [line for n, line in enumerate(after) if n not in TRUST_RULES] == [
        line for n, line in enumerate(before) if n not in TRUST_RULES
    ]


def test_trust_in_a_comment_is_not_a_trust_rule() -> None:
    assert not hba_trusts("# local all all trust\nlocal all all scram-sha-256\n")
