"""What `bwprof run --dry-run` prints: the plan case by case, what each costs by the
planner's estimate, what cannot run here and why, and the totals, one line of which
(`estimated time: N s`) scripts read to size their own steps (`scripts/gpu_check.sh`).
Rendering only: it formats the records `bwprof.api.PlannedRun.table` gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bwprof.units import clock, format_bytes

ESTIMATE_PREFIX = "estimated time: "


def _sizes(sizes: Sequence[int]) -> str:
    if not sizes:
        return ""
    if len(sizes) == 1:
        return format_bytes(sizes[0])
    return f"{format_bytes(sizes[0])} .. {format_bytes(sizes[-1])} ({len(sizes)})"


def _memory(nbytes: object) -> str:
    return format_bytes(nbytes) if isinstance(nbytes, int) and nbytes > 0 else ""


def plan_lines(title: str, settings: str, records: Sequence[Mapping[str, object]], *,
               seconds: float, once_s: float, peak_host_bytes: int,
               peak_device_bytes: int, memory_total_bytes: int | None,
               dropped: Sequence[str] = (), budget_s: float | None = None,
               notes: Sequence[str] = ()) -> list[str]:
    """The dry run's report, line by line."""
    lines = [f"bwprof run --dry-run (nothing is measured): {title}", settings, ""]
    header = (f" {'case':<22} {'jobs':>5}  {'sizes':<26} {'on':<18} {'time':>8}  "
              f"{'host mem':>9}  {'GPU mem':>9}")
    lines += [header, " " + "─" * (len(header) - 1)]
    not_run: dict[tuple[str, str], list[str]] = {}
    for record in records:
        if record["status"] != "planned":
            not_run.setdefault((str(record["status"]), str(record["reason"])),
                               []).append(str(record["case"]))
            continue
        sizes = record["sizes"]
        lines.append(
            f" {record['case']!s:<22} {record['jobs']!s:>5}  "
            f"{_sizes(sizes if isinstance(sizes, tuple) else ()):<26} {record['over']!s:<18} "
            f"{float(record['seconds']):>6.1f} s  {_memory(record['host_bytes']):>9}  "  # type: ignore[arg-type]
            f"{_memory(record['device_bytes']):>9}")
    lines.append(f" {'once: starting, and the report at the end':<74} {once_s:>6.1f} s")
    lines.append("")
    for (status, reason), cases in not_run.items():
        shown = ", ".join(cases[:3]) + (", ..." if len(cases) > 3 else "")
        lines.append(f"{status} {len(cases)} case(s) ({shown}): {reason}")
    share = (f" ({peak_host_bytes / memory_total_bytes:.0%} of the "
             f"{format_bytes(memory_total_bytes)} of RAM)" if memory_total_bytes else "")
    measured = sum(int(r["jobs"]) for r in records if r["status"] == "planned")  # type: ignore[call-overload]
    lines.append(f"{ESTIMATE_PREFIX}{seconds:.0f} s ({clock(round(seconds))}) for {measured} "
                 "job(s), by the speeds of a slow machine (bwprof/costs.py)")
    lines.append(f"peak memory: host {format_bytes(peak_host_bytes)}{share}"
                 + (f", GPU {format_bytes(peak_device_bytes)} on the GPU holding most"
                    if peak_device_bytes else ""))
    if budget_s is not None:
        lines.append(f"--budget {budget_s:g} s: "
                     + ("dropped " + "; ".join(dropped) if dropped else "the plan fits as it is"))
    lines += list(notes)
    return [line.rstrip() for line in lines]
