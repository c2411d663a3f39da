"""Which rank pairs `net_p2p` measures: O(N) of them by default, every ordered pair on demand.

Every ordered pair of N ranks is N(N-1) jobs (1,000 nodes: 999,000), and a star from rank 0
says nothing of the other nodes' links to each other. The default instead:

- a **ring**, both ways: each rank sends to its neighbour and the neighbour back. The ring
  visits the ranks node by node in turn (the first rank of every node, then the second of
  every node, ...), so with several ranks per node every neighbour is on another node (the
  network, not shared memory); with one rank per node, or all ranks on one node, it is
  simply r -> r+1 -> r (mod N);
- a fixed number of **sampled pairs per rank** as sender (`SAMPLES_PER_RANK`), drawn from a
  seed (the run's id) so every rank computes the same list and the same id gives the same
  pairs. Peers on another node are preferred; with groups (a switch or rack per host, see
  `read_groups`) the samples alternate between a peer in another group (the links between
  switches) and one in the same group. The groups come from a `--groups` file, or else
  from Slurm's topology (`slurm_switch`: each task's leaf switch) where the job has one.

Pure Python and deterministic: no MPI here, so the selection is tested at any N.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bwprof.errors import BwprofError

SAMPLES_PER_RANK = 2
"""Sampled pairs each rank sends on beside the ring: enough to reach past its neighbours."""
TRIES = 64
"""Random draws before a sample falls back to listing its candidates (keeps a draw O(1)
in the usual case, so the whole selection is O(N))."""

RING, SAMPLED, ACROSS, WITHIN, ALL = ("ring", "sampled", "sampled across groups",
                                      "sampled within a group", "all pairs")
ANY = "any"
"""A sample's last resort: any peer not chosen yet (one on this rank's own node too)."""


@dataclass(frozen=True)
class Pairs:
    """The ordered (sender, receiver) pairs to measure, in order, each with why it was
    chosen (RING, SAMPLED, ACROSS, WITHIN or ALL), and one line saying how they were chosen."""

    pairs: tuple[tuple[int, int], ...]
    reasons: tuple[str, ...]
    note: str


def ring_order(hosts: Sequence[str]) -> list[int]:
    """The ranks, node by node in turn: each node's first rank (nodes in order of their first
    rank), then each node's second, and so on."""
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    nodes = list(by_host.values())
    depth = max((len(ranks) for ranks in nodes), default=0)
    return [ranks[i] for i in range(depth) for ranks in nodes if i < len(ranks)]


def ring(hosts: Sequence[str]) -> list[tuple[int, int]]:
    """Each rank to the next in `ring_order` and back, without repeats (2 ranks: 2 pairs)."""
    order = ring_order(hosts)
    pairs: dict[tuple[int, int], None] = {}
    if len(order) < 2:
        return []
    for i, rank in enumerate(order):
        after = order[(i + 1) % len(order)]
        pairs.setdefault((rank, after))
        pairs.setdefault((after, rank))
    return list(pairs)


def _pick(rng: random.Random, candidates: Sequence[int],
          fits: Callable[[int], bool]) -> int | None:
    """A rank drawn from the `candidates` that `fits` accepts, or None where there is none."""
    if not candidates:
        return None
    for _ in range(TRIES):
        peer = candidates[rng.randrange(len(candidates))]
        if fits(peer):
            return peer
    pool = [peer for peer in candidates if fits(peer)]
    return rng.choice(pool) if pool else None


def select_pairs(hosts: Sequence[str], seed: str, *, all_pairs: bool = False,
                 groups: Mapping[str, str] | None = None,
                 per_rank: int = SAMPLES_PER_RANK) -> Pairs:
    """The pairs of a fleet of `len(hosts)` ranks (`hosts[r]`: rank r's node; `groups`:
    node -> switch or rack, a node not listed a group of its own)."""
    size = len(hosts)
    if all_pairs:
        pairs = [(s, r) for s in range(size) for r in range(size) if s != r]
        return Pairs(tuple(pairs), (ALL,) * len(pairs),
                     f"every ordered pair of the {size} ranks (--all-pairs): {len(pairs)}")
    chosen: dict[tuple[int, int], str] = dict.fromkeys(ring(hosts), RING)
    group = [(groups or {}).get(host, f"\0{host}") for host in hosts]
    members: dict[str, list[int]] = {}
    for rank, name in enumerate(group):
        members.setdefault(name, []).append(rank)
    rng = random.Random(f"bwprof net_p2p {seed}")  # a str seed: the same on every platform

    def fits(kind: str, sender: int, peer: int) -> bool:
        """Whether `peer` may be `sender`'s sample of this kind (and is not chosen yet)."""
        if peer == sender or (sender, peer) in chosen:
            return False
        if kind == ANY:
            return True
        if hosts[peer] == hosts[sender]:  # the same node: shared memory, not the network
            return False
        return kind == SAMPLED or (group[peer] == group[sender]) == (kind == WITHIN)

    for sender in range(size):
        for sample in range(per_rank):
            order = ([ACROSS, WITHIN] if sample % 2 == 0 else [WITHIN, ACROSS]) if groups \
                else [SAMPLED]
            for kind in [*order, ANY]:
                candidates = members[group[sender]] if kind == WITHIN else range(size)
                peer = _pick(rng, candidates, partial(fits, kind, sender))
                if peer is not None:
                    chosen[(sender, peer)] = SAMPLED if kind == ANY else kind
                    break
    sampled = sum(reason != RING for reason in chosen.values())
    grouped = (f", across and within {len(set(group))} groups (--groups)" if groups else "")
    note = (f"ring (each rank to its neighbour and back: {len(chosen) - sampled} pairs) + "
            f"{sampled} sampled pairs (up to {per_rank} per rank{grouped}; seed {seed}): "
            f"{len(chosen)} of the {size * (size - 1)} ordered pairs; --all-pairs measures "
            f"all {size * (size - 1)}")
    return Pairs(tuple(chosen), tuple(chosen.values()), note)


def read_groups(path: Path) -> dict[str, str]:
    """A `--groups` file: one `host group` per line (the group: a switch, a rack), blank
    lines and `#` comments ignored; BwprofError with one line for a malformed file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BwprofError(f"--groups {path}: cannot read it ({exc})") from None
    groups: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2:
            raise BwprofError(f"--groups {path} line {number}: expected 'host group', got "
                              f"{line.strip()!r}")
        host, name = fields
        if groups.get(host, name) != name:
            raise BwprofError(f"--groups {path} line {number}: {host} is in group "
                              f"{groups[host]} already, not {name}")
        groups[host] = name
    if not groups:
        raise BwprofError(f"--groups {path}: no 'host group' line in it")
    return groups


def groups_of(hosts: Sequence[str], groups: Mapping[str, str]) -> tuple[dict[str, str],
                                                                         list[str]]:
    """The group of each of `hosts` (a name listed as given, or its short name: `node7` for
    `node7.cluster`, and the other way round), and the hosts the file does not list."""
    short = {name.split(".", 1)[0]: group for name, group in groups.items()}
    found: dict[str, str] = {}
    missing: list[str] = []
    for host in dict.fromkeys(hosts):
        group = groups.get(host, short.get(host.split(".", 1)[0]))
        if group is None:
            missing.append(host)
        else:
            found[host] = group
    return found, missing


def slurm_switch(environ: Mapping[str, str]) -> str | None:
    """This task's leaf switch in Slurm's topology (topology/tree): SLURM_TOPOLOGY_ADDR is
    the path from the top switch to the node, `s0.s3.node12` under the pattern
    `switch.switch.node`, so the leaf switch is `s0.s3`; None without a tree topology."""
    address = environ.get("SLURM_TOPOLOGY_ADDR", "").strip()
    pattern = environ.get("SLURM_TOPOLOGY_ADDR_PATTERN", "").strip().split(".")
    parts = address.split(".")
    if not address or len(parts) != len(pattern) or "switch" not in pattern[:-1]:
        return None
    return ".".join(parts[:-1])


def topology_groups(hosts: Sequence[str], switches: Sequence[str | None]) -> dict[str, str]:
    """Host -> leaf switch from every rank's Slurm address (`switches[r]`: rank r's); empty
    unless every rank has one (a partial map would group some nodes by guesswork)."""
    if not hosts or any(switch is None for switch in switches):
        return {}
    return {host: switch for host, switch in zip(hosts, switches, strict=True)
            if switch is not None}
