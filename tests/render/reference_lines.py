"""The report's overlap, pipeline and not-run lines as they were made of ResultRows before
issue 36 read them from the frame's columns: the oracle `test_terminal_frame_lines` holds
the column reading to, so a fleet's lines stay the lines one row at a time gave."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from bwprof.render.terminal import MAX_REASON_LINES, _size
from bwprof.schema.rows import ResultRow


def not_run_lines(rows: Sequence[ResultRow]) -> list[str]:
    """One line per distinct reason for skipped or waived rows, naming the cases it covers."""
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in rows:
        case = row.case or "(no case name)"  # a damaged results.csv's empty name
        if row.status in ("skipped", "waived") and case not in grouped[(row.status, row.note)]:
            grouped[(row.status, row.note)].append(case)
    lines = []
    for (status, reason), cases in list(grouped.items())[:MAX_REASON_LINES]:
        shown = ", ".join(cases) if len(cases) <= 4 else f"{', '.join(cases[:3])}, ..."
        lines.append(f"{status} {len(cases)} case(s) ({shown}): {reason}")
    if len(grouped) > MAX_REASON_LINES:
        rest = list(grouped)[MAX_REASON_LINES:]
        lines.append(f"... and {len(rest)} more reason(s) for skipped or waived rows; see the "
                     "status and note columns of results.csv")
    return lines


def overlap_lines(rows: Sequence[ResultRow]) -> list[str]:
    """One line per overlap case and device (efficiency, parts alone and together), and per
    device the pipeline configuration with the best end-to-end throughput."""
    from bwprof.analysis.figures import ratio

    # One pass over the rows (a fleet's are tens of thousands per line kind): each row's
    # parts kept to be looked up, not searched for, and only the phases looked up.
    parts_of: dict[tuple[object, ...], list[ResultRow]] = defaultdict(list)
    concurrent: list[ResultRow] = []
    pipelines: dict[str, list[ResultRow]] = {}
    for r in rows:
        phase = r.phase
        if not phase or r.status not in ("ok", "invalid") or r.backend == "simulated":
            continue
        if phase == "alone" or phase == "paired":
            parts_of[(r.case, r.device, r.size_bytes, phase)].append(r)
        elif phase == "concurrent":
            if r.overlap_efficiency is not None:
                concurrent.append(r)
        elif phase == "pipeline" and r.gbps_median:
            pipelines.setdefault(r.device, []).append(r)
    lines = []
    for row in concurrent:
        alone = parts_of.get((row.case, row.device, row.size_bytes, "alone"), [])
        # The efficiency's parts: where the copies ran as a pair (both directions at once),
        # the pair's `both` row is the copies' part, not each direction alone.
        pair = [r for r in parts_of.get((row.case, row.device, row.size_bytes, "paired"), [])
                if r.direction == "both"]
        if pair:
            alone = pair + [r for r in alone if r.direction == "compute"]
        parts = " + ".join(f"{r.direction} {1e3 * (r.time_median_s or 0):.2f}" for r in alone)
        lines.append(
            f"{row.case} {row.device}: overlap efficiency {row.overlap_efficiency:.2f} "
            f"(alone {parts} ms, together {1e3 * (row.time_median_s or 0):.2f} ms per op)"
            + ("" if row.status == "ok" else f" [{row.status}]")
        )
    for device, mine in pipelines.items():
        best = max(mine, key=lambda r: r.gbps_median or 0.0)
        best_gbps = best.gbps_median or 0.0
        # Against the copies in and out at once (the link both ways): what a pipeline that
        # hid its kernel could reach. Runs before that reference compare with one direction.
        both_ways = next(iter(parts_of.get((best.case, device, best.size_bytes, "paired"), [])),
                         None)
        copy = next((r for r in parts_of.get((best.case, device, best.size_bytes, "alone"), [])
                     if r.direction == "h2d"), None)
        # ratio: None (no comparison) against 0 or 5e-324 GB/s (a damaged row), never inf
        in_out = ratio(best_gbps, both_ways.gbps_median) if both_ways is not None else None
        over_copy = ratio(best_gbps, copy.gbps_median) if copy is not None else None
        versus = (f", {in_out:.2f} of the copies in and out at once" if in_out is not None
                  else f", {over_copy:.2f}x the H2D copy alone" if over_copy is not None else "")
        lines.append(f"pipeline_chunked {device}: best {best.streams} stream(s) x "
                     f"{_size(best)} chunks, {best_gbps:.2f} GB/s in + out{versus}")
    return lines


def pipeline_digest(rows: Sequence[ResultRow]) -> list[str]:
    """The pipeline line of `fleet_overlap_lines`, as it read ResultRows."""
    lines = []
    best: dict[str, tuple[float, ResultRow]] = {}
    for r in rows:  # each GPU's best pipeline configuration, as overlap_lines picks it
        if (r.phase == "pipeline" and r.gbps_median and r.status in ("ok", "invalid")
                and r.backend != "simulated"
                and (r.device not in best or r.gbps_median > best[r.device][0])):
            best[r.device] = (r.gbps_median, r)
    if best:
        import statistics

        figures = [gbps for gbps, _ in best.values()]
        low_device = min(best, key=lambda d: best[d][0])
        configs: dict[str, int] = defaultdict(int)
        for _, r in best.values():
            configs[f"{r.streams} stream(s) x {_size(r)} chunks"] += 1
        common, many = max(configs.items(), key=lambda item: item[1])
        lines.append(f"pipeline_chunked on {len(best)} GPUs: best configuration's GB/s in + "
                     f"out median {statistics.median(figures):.2f}, lowest "
                     f"{best[low_device][0]:.2f} ({low_device}); most often best: {common} "
                     f"(on {many} GPUs)")
    return lines
