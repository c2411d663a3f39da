"""A fleet run's options for net_p2p's pairs, from the command line to rank 0's checks
(no MPI: run_fleet is stood in for, or a one-rank fleet of a fake communicator)."""

from __future__ import annotations

import signal

import pytest
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.errors import BwprofError
from bwprof.fleet import run as fleet_run
from bwprof.fleet.comm import LAUNCH_SIZE_VARIABLES, Fleet

runner = CliRunner()


@pytest.fixture
def no_launcher(monkeypatch):
    for name in LAUNCH_SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("option", [["--all-pairs"], ["--groups", "racks.txt"]])
def test_pair_options_need_a_fleet_run(no_launcher, option):
    result = runner.invoke(app, ["run", "--cases", "ddr_triad", *option])
    assert result.exit_code == 2
    assert "--all-pairs and --groups choose net_p2p's rank pairs: they need a fleet run" in (
        result.output)
    assert "Traceback" not in result.output


def test_pair_options_reach_the_fleet_run(no_launcher, monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(fleet_run, "run_fleet", lambda **kwargs: seen.update(kwargs))
    result = runner.invoke(app, ["run", "--mpi", "--cases", "net_p2p", "--all-pairs",
                                 "--groups", "racks.txt", "--out", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    assert seen["all_pairs"] is True and seen["groups"] == "racks.txt"
    result = runner.invoke(app, ["run", "--mpi", "--cases", "net_p2p",
                                 "--out", str(tmp_path / "g")])
    assert seen["all_pairs"] is False and seen["groups"] is None


def _options(groups):
    return {"cases": "net_p2p", "preset": "quick", "repeats": None, "threads": None,
            "size": None, "sample_interval_ms": 50.0, "file_format": "csv",
            "all_pairs": False, "groups": groups}


def test_a_bad_groups_file_stops_the_run_on_rank_0_with_one_line(tmp_path):
    racks = tmp_path / "racks.txt"
    racks.write_text("node1 rack-a extra\n")
    alone = Fleet(None, 0, 1, 0, 1, "node1", 1.0)  # one rank: its broadcasts send nothing
    with pytest.raises(BwprofError, match=r"--groups .*racks.txt line 1: expected 'host "
                                          r"group', got 'node1 rack-a extra'"):
        fleet_run._take_part(alone, tmp_path / "out", 1.0, None, None, None, None,
                             _options(racks))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


class _Rank1Of6:
    """Rank 1's view of a 6-rank fleet: every broadcast answered from a script."""

    rank, size, local_rank, local_size, host = 1, 6, 0, 1, "node1"

    def __init__(self, answers):
        self.answers = list(answers)

    def bcast(self, value, what):
        return self.answers.pop(0)

    def gather(self, value, what, hurry=None):
        return None

    def stream(self, value, what, take, sources=None, hurry=None):
        return None

    def heartbeat(self):
        pass

    def drain(self):
        pass


def _rank_1s_pairs(monkeypatch, fleet: _Rank1Of6, **options):
    """The net_p2p pairs rank 1 of `fleet` measures in a fleet run (`options`: run_fleet's),
    measuring nothing itself: api.run is stood in for and records them."""
    from types import SimpleNamespace

    monkeypatch.setattr(fleet_run, "Fleet", SimpleNamespace(join=lambda timeout: fleet))
    shares = []

    def measure(**given):
        shares.append(given["fleet"])
        raise RuntimeError("measured nothing")

    monkeypatch.setattr(fleet_run.api, "run", measure)
    with pytest.raises(SystemExit):
        fleet_run.run_fleet(out=None, **options, **{
            k: v for k, v in _options(None).items() if k not in ("all_pairs", "groups")},
            simulate=True, plots=False, telemetry=False)
    (share,) = shares
    return share.executor.pairs


def test_the_groups_rank_0_read_and_the_run_id_choose_every_ranks_pairs(monkeypatch, tmp_path):
    from bwprof.fleet.pairs import ACROSS, WITHIN

    hosts = [(0, f"node{r}", None) for r in range(6)]
    racks = {"node0": "a", "node1": "a", "node2": "a", "node3": "b", "node4": "b"}  # no node5
    fleet = _Rank1Of6([(None, "fleet-1", tmp_path / "run"), racks, hosts, (False, "test"),
                       1])  # the last: rank 0's word that the merged folder is written
    pairs = _rank_1s_pairs(monkeypatch, fleet, groups="racks.txt")
    assert "across and within 3 groups (--groups); seed fleet-1)" in pairs.note
    assert {ACROSS, WITHIN} <= set(pairs.reasons)
    assert fleet.answers == []  # the groups came from rank 0, as every broadcast


def test_without_a_groups_file_slurms_leaf_switches_group_the_pairs(monkeypatch, tmp_path):
    """srun under topology/tree: each task's SLURM_TOPOLOGY_ADDR names its leaf switch; the
    pairs are sampled across and within those switches, and the notes say where from."""
    from bwprof.fleet.pairs import ACROSS, WITHIN

    switches = ["top.s1", "top.s1", "top.s1", "top.s2", "top.s2", "top.s2"]
    peers = [(0, f"node{r}", switch) for r, switch in enumerate(switches)]
    fleet = _Rank1Of6([(None, "fleet-1", tmp_path / "run"), peers, (False, "test"), 1])
    monkeypatch.setenv("SLURM_TOPOLOGY_ADDR", "top.s1.node1")
    monkeypatch.setenv("SLURM_TOPOLOGY_ADDR_PATTERN", "switch.switch.node")
    assert {ACROSS, WITHIN} <= set(_rank_1s_pairs(monkeypatch, fleet).reasons)
    assert fleet.answers == []


class _Votes:
    """Rank 0's side of a fleet's vote: gather gives every rank's ballot, bcast echoes."""

    def __init__(self, ballots):
        self.ballots, self.sent = ballots, []

    def gather(self, value, what):
        return {0: value, **self.ballots}

    def bcast(self, value, what):
        self.sent.append(value)
        return value


def test_every_rank_takes_the_budget_steps_of_the_rank_whose_plan_costs_most():
    fleet = _Votes({1: (900.0, (0, 5, 6)), 2: None, 3: "garbage", 4: (300.0, (5,))})
    vote = fleet_run.BudgetVote(fleet)
    assert vote(500.0, (5,)) == (0, 5, 6)  # rank 1 asked for most: its steps for all
    assert fleet.sent == [(0, 5, 6)]
    vote.abstain()  # it voted: nothing more is sent
    assert fleet.sent == [(0, 5, 6)]


def test_a_rank_that_never_fitted_a_plan_still_votes_so_the_steps_after_stay_in_step():
    fleet = _Votes({1: (100.0, (5,))})
    vote = fleet_run.BudgetVote(fleet)
    vote.abstain()
    assert vote.voted and fleet.sent == [(5,)]
    assert fleet_run.BudgetVote(_Votes({1: None}))(None, ()) is None  # nobody voted


def test_a_stop_signal_during_the_vote_waits_for_its_broadcast():
    """A signal between the vote's gather and its broadcast is held until both are done, so
    the rank's collectives stay in step with rank 0's (then it is raised)."""
    from bwprof import interrupts

    class _Interrupted(_Votes):
        def gather(self, value, what):
            interrupts._handle(signal.SIGTERM, None)  # as if it landed here
            return super().gather(value, what)

    fleet = _Interrupted({1: (900.0, (5,))})
    interrupts.reset()
    try:
        with pytest.raises(KeyboardInterrupt):
            fleet_run.BudgetVote(fleet)(100.0, ())
        assert fleet.sent == [(5,)]  # the broadcast went out before the stop
    finally:
        interrupts.reset()
