"""What a run measures and for how long: the full run, and the quick smoke run CI uses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from benchmarks.workers import Mode, TransportKind

Scenario = Literal["latency", "throughput", "trigger", "sustained", "drivers", "events"]
SCENARIOS: tuple[Scenario, ...] = (
    "latency",
    "throughput",
    "trigger",
    "sustained",
    "drivers",
    "events",
)
ProducerKind = Literal["library", "http"]


@dataclass(frozen=True, slots=True)
class ModeSpec:
    """One way of finding work, as the latency scenario compares them."""

    name: str
    mode: Mode
    poll_interval: float | None = None


MODES = (
    ModeSpec("notify", "notify"),
    ModeSpec("poll 1s", "poll", 1.0),
    ModeSpec("poll 100ms", "poll", 0.1),
    ModeSpec("poll 10ms", "poll", 0.01),
)


@dataclass(frozen=True, slots=True)
class ThroughputProfile:
    """Worker settings a drain runs with; None keeps the library default."""

    name: str
    concurrency: int | None = None
    batch_size: int | None = None
    smtp_pool_size: int | None = None
    # The transports this profile is run with.
    transports: tuple[TransportKind, ...] = ("null", "smtp")


DEFAULT_PROFILE = ThroughputProfile("defaults")
# Enough sends in flight that a claim can take a full batch: with the null transport nothing
# else bounds a batch (at the default 8 a claim takes at most 8 rows).
BATCH_PROFILE = ThroughputProfile(
    "concurrency 200, batch 200", concurrency=200, batch_size=200, transports=("null",)
)
# No SMTP profile beyond the defaults: more sends in flight than SMTP connections only makes
# claims wait for a connection (the worker warns), and the defaults match the two.


@dataclass(frozen=True, slots=True)
class SustainedCase:
    """One sustained-load run: how verifications are requested, at what offered rate, and
    how many worker (and API) processes serve them, each at library defaults."""

    producer: ProducerKind  # "library": request_verification; "http": POST /v1/verifications
    rate: float | None  # offered verifications per second; None: as fast as they go
    workers: int = 1
    api_processes: int = 1  # "http" only
    seconds: float | None = None  # the window; None: RunConfig.sustained_seconds

    def producers(self, config: RunConfig) -> int:
        """How many producers (each on a connection of its own) this case runs."""
        if self.producer == "http":
            return config.sustained_http_connections
        return config.sustained_producers

    @property
    def name(self) -> str:
        rate = "max" if self.rate is None else f"{self.rate:g}"
        api = f"-{self.api_processes}api" if self.producer == "http" else ""
        return f"{self.producer}-{rate}-{self.workers}w{api}"


# The grid. The library path varies the workers (delivery does not care how a row
# was written); the HTTP path varies the API processes. 50/s and 1,000/s with one worker run
# for a full minute: their latencies and the backlog's trend are targets.
SUSTAINED_CASES: tuple[SustainedCase, ...] = (
    SustainedCase("library", 50.0, seconds=60.0),
    SustainedCase("library", 500.0),
    SustainedCase("library", 1000.0, seconds=60.0),
    SustainedCase("library", 2000.0),
    SustainedCase("library", None),
    SustainedCase("library", 500.0, workers=2),
    SustainedCase("library", 1000.0, workers=2),
    SustainedCase("library", 2000.0, workers=2),
    SustainedCase("library", None, workers=2),
    SustainedCase("http", 200.0),
    SustainedCase("http", 500.0),
    SustainedCase("http", 1000.0),
    SustainedCase("http", 2000.0),
    SustainedCase("http", None),
    SustainedCase("http", 200.0, api_processes=2),
    SustainedCase("http", 500.0, api_processes=2),
    SustainedCase("http", 1000.0, api_processes=2),
    SustainedCase("http", 2000.0, api_processes=2),
    SustainedCase("http", None, api_processes=2),
)
QUICK_SUSTAINED_CASES: tuple[SustainedCase, ...] = (
    SustainedCase("library", 500.0, seconds=3.0),
    SustainedCase("library", None, workers=2),
    SustainedCase("http", 200.0),
    SustainedCase("http", None, api_processes=2),
)


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Every duration, rate and size a run uses (seconds unless named otherwise)."""

    quick: bool
    # Latency and cost (scenarios 1 and 2).
    rate: float = 100.0  # verifications per second
    # Each mode runs `latency_rounds` times, the modes taking turns; the windows below are
    # per round (the full run: 3 x 10 s idle and 3 x 10 s loaded per mode).
    latency_rounds: int = 3
    load_seconds: float = 10.0
    idle_seconds: float = 10.0
    warmup_seconds: float = 1.0  # produced at the rate before the load window, not counted
    settle_seconds: float = 2.0  # after the workers are ready: start-up sweep, pool warm-up
    floor_seconds: float = 20.0
    latency_workers: int = 1
    claim_commit_samples: int = 1000  # per variant
    # Throughput (scenario 3).
    backlog_rows: int = 20_000
    throughput_processes: tuple[int, ...] = (1, 2)
    throughput_transports: tuple[TransportKind, ...] = ("null", "smtp")
    throughput_profiles: tuple[ThroughputProfile, ...] = (
        DEFAULT_PROFILE,
        BATCH_PROFILE,
    )
    smtp_baseline_seconds: float = 10.0
    smtp_baseline_connections: int = 8  # the worker's default SMTP pool size
    drain_timeout: float = 180.0
    # The trigger's cost (scenario 4).
    trigger_producers: tuple[int, ...] = (1, 8)
    trigger_seconds: float = 4.0
    trigger_rounds: int = 3
    # Sustained load (scenario 5).
    sustained_cases: tuple[SustainedCase, ...] = SUSTAINED_CASES
    sustained_seconds: float = 20.0  # a case's window unless it names its own
    sustained_producers: int = 4  # library connections, each a producer of its own
    sustained_http_connections: int = 8  # kept-alive HTTP connections, each a producer
    sustained_warmup_seconds: float = 1.0  # at the case's rate, not counted
    sustained_drain_timeout: float = 60.0  # after the window, for the rest to be delivered
    probe_requests: int = 100  # sequential requests on one kept-alive connection
    # The library call on each driver (scenario 6).
    drivers_seconds: float = 5.0
    drivers_rounds: int = 3
    drivers_made: int = 12_000  # requests made beforehand per connection (adapter, alone)
    # What events cost, and webhooks' pace (scenario 7).
    events_seconds: float = 5.0  # each request-path run
    events_rounds: int = 5  # the worker's CPU per delivery varies by about 10% round to round
    events_rows: int = 5_000  # each delivery-path drain, and the webhooks sent
    scenarios: tuple[Scenario, ...] = SCENARIOS

    def with_scenarios(self, scenarios: tuple[Scenario, ...]) -> RunConfig:
        return dataclasses.replace(self, scenarios=scenarios)

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def planned_seconds(self) -> dict[Scenario, float]:
        """A rough budget per scenario, for the progress bar."""
        start = 2.5  # starting a worker process and its first sweep
        per_mode = start + self.settle_seconds + self.idle_seconds + self.warmup_seconds
        per_mode += self.load_seconds + 1.5
        latency = (
            self.floor_seconds
            + 2
            + self.latency_rounds * len(MODES) * per_mode
            + 3 * self.claim_commit_samples / 500
        )
        throughput = len(self.throughput_processes) * (self.smtp_baseline_seconds + 2)
        for profile in self.throughput_profiles:
            for transport in set(profile.transports) & set(self.throughput_transports):
                for n in self.throughput_processes:
                    throughput += drain_budget(self, transport, n)
        # Two workloads, trigger on and off, per producer count and round.
        runs = self.trigger_rounds * len(self.trigger_producers) * 2 * 2
        trigger = runs * (self.trigger_seconds + 0.7)
        drivers = 3 + self.drivers_rounds * 5 * 3 * (self.drivers_seconds + 0.5)
        # The request path, then the delivery path at two profiles, each on and off per round.
        events = self.events_rounds * 2 * (self.events_seconds + 0.5)
        events += 2 * self.events_rounds * 2 * (self.events_rows / 500 + 10)
        events += 2 * (self.events_rows / 200 + 15)
        budget: dict[Scenario, float] = {
            "latency": latency,
            "throughput": throughput,
            "trigger": trigger,
            "sustained": sustained_budget(self),
            "drivers": drivers,
            "events": events,
        }
        return {s: budget[s] for s in self.scenarios}


# Rough drain rates for the progress bar's budget, deliveries per second.
EXPECTED_DRAIN_RATE: dict[TransportKind, float] = {"null": 2500.0, "smtp": 250.0}


def drain_budget(config: RunConfig, transport: TransportKind, processes: int) -> float:
    """Seconds one drain is expected to take, start-up included."""
    rate = EXPECTED_DRAIN_RATE[transport]
    return 2.5 * processes + config.settle_seconds + config.backlog_rows / rate


# Seconds to start one process (a worker, an API) and for `notifier dev` with its inbox.
PROCESS_START_SECONDS = 2.5
DEV_START_SECONDS = 4.0
# Rough pace of one delayed-ACK probe request (without the stall), seconds.
PROBE_REQUEST_SECONDS = 0.003


def sustained_budget(config: RunConfig) -> float:
    """Seconds the sustained scenario is expected to take, start-ups included."""
    total = 2 * PROCESS_START_SECONDS + DEV_START_SECONDS
    total += 2 * config.probe_requests * PROBE_REQUEST_SECONDS
    for case in config.sustained_cases:
        window = case.seconds or config.sustained_seconds
        processes = case.workers + (case.api_processes if case.producer == "http" else 0)
        # As fast as they go, the producers may outrun the workers: half a window to drain.
        drain = window / 2 if case.rate is None else 1.0
        total += processes * PROCESS_START_SECONDS + config.sustained_warmup_seconds
        total += window + drain + 1.5
    return total


FULL = RunConfig(quick=False)
QUICK = RunConfig(
    quick=True,
    latency_rounds=1,
    load_seconds=2.0,
    idle_seconds=2.0,
    warmup_seconds=0.5,
    settle_seconds=0.5,
    floor_seconds=2.0,
    claim_commit_samples=100,
    backlog_rows=1_000,
    smtp_baseline_seconds=1.5,
    drain_timeout=60.0,
    trigger_seconds=1.0,
    trigger_rounds=1,
    sustained_cases=QUICK_SUSTAINED_CASES,
    sustained_seconds=2.0,
    sustained_warmup_seconds=0.5,
    sustained_drain_timeout=20.0,
    probe_requests=30,
    drivers_seconds=1.0,
    drivers_rounds=1,
    drivers_made=1_500,
    events_seconds=1.0,
    events_rounds=1,
    events_rows=500,
)
