"""A real Postfix relay, started by a test with a configuration of its own: it listens on
loopback, relays everything to a next hop (a test SMTP server), and sends the delivery status
notifications it writes for the bounce domain to `notifier inbound`. Postfix's master runs
as root (it drops privileges itself): CI runs as root; elsewhere such tests are skipped."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import harness

POSTFIX = shutil.which("postfix") or "/usr/sbin/postfix"
_MASTER_CF = """\
127.0.0.1:{port} inet n - n - - smtpd
pickup    unix  n - n 60 1 pickup
cleanup   unix  n - n - 0 cleanup
qmgr      unix  n - n 300 1 qmgr
rewrite   unix  - - n - - trivial-rewrite
bounce    unix  - - n - 0 bounce
defer     unix  - - n - 0 bounce
trace     unix  - - n - 0 bounce
verify    unix  - - n - 1 verify
flush     unix  n - n 1000? 0 flush
proxymap  unix  - - n - - proxymap
smtp      unix  - - n - - smtp
relay     unix  - - n - - smtp
showq     unix  n - n - - showq
error     unix  - - n - - error
retry     unix  - - n - - error
discard   unix  - - n - - discard
anvil     unix  - - n - 1 anvil
scache    unix  - - n - 1 scache
postlog   unix-dgram n - n - 1 postlogd
"""


def available() -> bool:
    return os.geteuid() == 0 and Path(POSTFIX).exists()


def require() -> None:
    """Skip unless Postfix can run here; fail instead where topologies are required (CI)."""
    if available():
        return
    if harness.value(harness.REQUIRE_TOPOLOGIES):
        pytest.fail("Postfix is required here (Debian's postfix, run as root)")
    pytest.skip("needs Debian's postfix and root")


@contextlib.contextmanager
def running_postfix(
    port: int, relay_port: int, bounce_domain: str, inbound_port: int
) -> Iterator[Path]:
    """Postfix on 127.0.0.1:`port`, relaying to `relay_port` and sending `bounce_domain`'s
    mail to `inbound_port`, until the block ends; yields its log file."""
    root = Path(tempfile.mkdtemp(prefix="notifier-postfix-"))
    root.chmod(0o755)  # its daemons run as the postfix user and must reach the queue
    config, queue, data = root / "etc", root / "queue", root / "data"
    for directory in (config, queue, data):
        directory.mkdir()
    shutil.chown(data, "postfix", "postfix")
    data.chmod(0o700)
    log = root / "maillog"
    (config / "main.cf").write_text(
        "\n".join(
            [
                "compatibility_level = 3.6",
                f"queue_directory = {queue}",
                f"data_directory = {data}",
                "command_directory = /usr/sbin",
                "daemon_directory = /usr/lib/postfix/sbin",
                "meta_directory = /etc/postfix",
                "shlib_directory = /usr/lib/postfix",
                "mail_owner = postfix",
                "setgid_group = postdrop",
                "myhostname = relay.notifier.test",
                "mydomain = notifier.test",
                "myorigin = notifier.test",
                "mydestination =",
                "inet_interfaces = 127.0.0.1",
                "inet_protocols = ipv4",
                "mynetworks = 127.0.0.0/8",
                f"relayhost = [127.0.0.1]:{relay_port}",
                f"transport_maps = inline:{{{bounce_domain}=smtp:[127.0.0.1]:{inbound_port}}}",
                "smtp_dns_support_level = disabled",
                "disable_dns_lookups = yes",
                "smtp_tls_security_level = none",
                "smtpd_tls_security_level = none",
                "smtpd_relay_restrictions = permit_mynetworks, reject",
                "alias_maps =",
                "alias_database =",
                "local_recipient_maps =",
                # Its log goes to master's stdout, which the test keeps in `log`.
                "maillog_file = /dev/stdout",
                "minimal_backoff_time = 1s",
                "maximal_backoff_time = 2s",
                "queue_run_delay = 1s",
                "",
            ]
        )
    )
    (config / "master.cf").write_text(_MASTER_CF.format(port=port))
    with log.open("wb") as log_file:
        master = subprocess.Popen(
            [POSTFIX, "-c", str(config), "start-fg"], stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        yield log
    finally:
        subprocess.run([POSTFIX, "-c", str(config), "abort"], check=False, capture_output=True)
        try:
            master.wait(timeout=10)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait()
        shutil.rmtree(root, ignore_errors=True)
