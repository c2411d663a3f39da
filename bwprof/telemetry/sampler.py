"""A daemon thread that reads the counters on a drift-free schedule and tags every sample
with the job running at that moment.

Ticks fall at start + k x interval (k counted from the start, so late ticks do not shift
later ones; a tick missed entirely is skipped, not bunched). The clock and the wait are
injectable, so the schedule and the tagging are tested without threads or time.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence

from bwprof.coerce import number
from bwprof.errors import BwprofError

TAGS_KEPT = 16
"""Tag changes remembered: more than a read (tens of ms) ever spans between short jobs."""
MAX_ERRORS_KEPT = 20

Reading = dict[str, object]
Sample = dict[str, object]


class Sampler:
    def __init__(
        self,
        read: Callable[[], Sequence[Reading]],
        interval_s: float = 0.05,
        *,
        origin: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_samples: Callable[[list[Sample]], None] | None = None,
        keep: bool = True,
    ) -> None:
        """`keep=False` hands each batch to `on_samples` without keeping it (bwprof monitor
        runs until Ctrl-C and must not grow without bound)."""
        if interval_s <= 0:
            raise ValueError("sample interval must be positive")
        self.read = read
        self.interval_s = interval_s
        self.clock = clock
        self.origin = clock() if origin is None else origin
        self.on_samples = on_samples
        self.keep = keep
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        """The first MAX_ERRORS_KEPT errors (a reader failing every tick for an hour must
        not fill memory or system.json); `error_count` counts them all."""
        self.error_count = 0
        self.paused = False
        """While True the schedule runs on but nothing is read (`session.follow_job`)."""
        self._tags: list[tuple[float, dict[str, object]]] = [
            (-math.inf, {"case": "", "size_bytes": None, "job": ""})]
        """The latest tags with the time each was set, on this sampler's clock, oldest
        first: a read that spans several changes gives each reading the one then in force."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # tagging ---------------------------------------------------------------------------

    def tag(self, case: str, size_bytes: int | None, job: str) -> None:
        """Samples taken from now on belong to this job (empty strings between jobs)."""
        with self._lock:
            self._tags.append((self.now(), {"case": case, "size_bytes": size_bytes, "job": job}))
            del self._tags[:-TAGS_KEPT]

    def untag(self) -> None:
        self.tag("", None, "")

    def now(self) -> float:
        """Seconds since the origin, on the clock the samples use."""
        return self.clock() - self.origin

    # sampling --------------------------------------------------------------------------

    def sample_once(self) -> list[Sample]:
        """Read every GPU now and record the readings with the tag in force when each was
        taken. A reading that carries `read_s` (when its GPU was read, on this sampler's
        clock) is timed by it; others by the start of the whole read. A read can last tens
        of ms (NVML's PCIe sample): one taken before a tag change that came during the read
        keeps the tag in force when it was taken."""
        t_s = self.now()
        try:
            readings = self.read()
        except Exception as exc:  # a reader bug must not kill the run: record and go on
            self._error(f"{type(exc).__name__}: {exc}")
            return []
        with self._lock:
            tags = list(self._tags)
        batch = []
        for reading in readings:
            fields = dict(reading)
            read_s = fields.pop("read_s", None)
            own_t = t_s if read_s is None else number(read_s) - self.origin
            tag = next((tag for since, tag in reversed(tags) if since <= own_t), tags[0][1])
            batch.append({"t_s": own_t, **tag, **fields})
        if self.keep:
            self.samples.extend(batch)
        if self.on_samples is not None and batch:
            try:
                self.on_samples(batch)
            except Exception as exc:  # a full disk must not kill the thread mid-run
                # (bwprof's own errors are whole sentences already; RunWriter then takes
                # no more samples, and the run measures on)
                self._error(f"writing samples: {exc}" if isinstance(exc, BwprofError)
                            else f"writing samples: {type(exc).__name__}: {exc}")
        return batch

    def run(self, wait: Callable[[float], bool] | None = None,
            max_ticks: int | None = None) -> None:
        """The loop: sample, then wait for the next tick of the schedule. `wait(seconds)`
        returns True to stop (the thread's stop event by default)."""
        wait = wait or self._stop.wait
        start = self.clock()
        ticks = 0
        while max_ticks is None or ticks < max_ticks:
            if not self.paused:
                self.sample_once()
            ticks += 1
            elapsed = self.clock() - start
            next_tick = math.floor(elapsed / self.interval_s) + 1
            if wait(max(0.0, start + next_tick * self.interval_s - self.clock())):
                break

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="bwprof-sampler", daemon=True)
        self._thread.start()

    def _error(self, text: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(text)

    def stop(self) -> bool:
        """Stop after the current read; safe to call twice or before start. False when the
        thread is still running after 5 s (a read hangs in the driver): callers must then
        not free what it reads."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._thread.is_alive():
                self.error_count += 1  # kept whatever came before: callers act on it
                self.errors.append("the sampler thread did not stop within 5 s")
                return False
            self._thread = None
        return True
