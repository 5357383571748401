"""The error hierarchy: every failure notifier reports on purpose is a NotifierError."""

from __future__ import annotations


class NotifierError(Exception):
    """Root of every error notifier raises on purpose; the CLI prints these without a traceback."""


class UsageError(NotifierError):
    """The command line asks for something that cannot be done as asked."""


class ConfigError(NotifierError):
    """A setting is missing or invalid; the message names the setting."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


class DatabaseUnavailable(NotifierError):
    """The database cannot be reached (refused, unknown host, timed out, shutting down)."""

    def __init__(self, where: str, cause: BaseException) -> None:
        super().__init__(
            f"cannot reach the database at {where} ({type(cause).__name__}: {cause}); "
            "check NOTIFIER_DATABASE_URL and that PostgreSQL is running"
        )
        self.where = where


class EmbeddedServerError(NotifierError):
    """The embedded PostgreSQL could not be started, stopped or owned."""


class EmbeddedServerBusy(EmbeddedServerError):
    """Another live process owns the embedded PostgreSQL data directory."""

    def __init__(self, data_dir: str, owner_pid: int | None, detail: str | None = None) -> None:
        who = f"process {owner_pid}" if owner_pid else "another process"
        super().__init__(
            f"the embedded PostgreSQL in {data_dir} is in use by {who}"
            + (f", and {detail}" if detail else "")
            + ". Stop that process, choose another directory with NOTIFIER_DATA_DIR, "
            "or point NOTIFIER_DATABASE_URL at a server."
        )
        self.data_dir = data_dir
        self.owner_pid = owner_pid


class MigrationError(NotifierError):
    """The migrations on disk and those recorded in the database disagree."""


class ChangedMigrationError(MigrationError):
    """An applied migration's file no longer matches the checksum recorded when it ran."""

    def __init__(self, version: int, name: str, recorded: str, on_disk: str) -> None:
        super().__init__(
            f"migration {version:04d} ({name}) was applied with checksum {recorded[:12]}, "
            f"but its file now has checksum {on_disk[:12]}. Applied migrations are "
            "forward-only: restore the original file and add a new migration instead."
        )
        self.version = version
        self.recorded = recorded
        self.on_disk = on_disk
