from __future__ import annotations

from bwprof.analysis.fleet import differing_nodes, slower_nodes
from bwprof.schema.meta import NodeMeta
from bwprof.schema.table import results_frame
from tests.schema.builders import gpu, gpus
from tests.store.test_export import make_row


def test_a_node_more_than_10_percent_below_the_fleet_median():
    rows = [make_row(case="h2d_pinned", backend="cuda", device=f"node{i}:gpu0",
                     device_name="NVIDIA H200", direction="h2d", threads=None,
                     size_bytes=256 << 20, gbps_median=value, gbps_best=value * 1.02)
            for i, value in enumerate([55.0, 54.0, 48.0, 56.0])]
    rows.append(make_row(case="h2d_pinned", backend="cuda", device="node9:gpu0",
                         device_name="other GPU", direction="h2d", threads=None,
                         size_bytes=256 << 20, gbps_median=10.0, gbps_best=10.0 * 1.02))
    (finding,) = slower_nodes(results_frame(rows))
    assert finding.device == "node2:gpu0"
    assert "48.0 GB/s vs a fleet median of 54.5 GB/s over 4 NVIDIA H200" in finding.evidence


def test_one_node_is_not_a_fleet():
    rows = [make_row(device=f"node0:gpu{i}", backend="cuda", gbps_median=v, gbps_best=v * 1.02)
            for i, v in enumerate([50.0, 10.0])]
    assert slower_nodes(results_frame(rows)) == []


def _gbps(median: float) -> dict[str, float]:
    """The figure compared (the median) and a best 2% above it."""
    return {"gbps_median": median, "gbps_best": median * 1.02}


def test_hosts_are_compared_whole_not_against_one_numa_node():
    rows = [make_row(device="node0:cpu", **_gbps(300.0)),
            make_row(device="node1:cpu", **_gbps(295.0)),
            make_row(device="node0:numa0", numa_node=0, **_gbps(150.0)),
            make_row(device="node1:numa1", numa_node=1, **_gbps(148.0))]
    assert slower_nodes(results_frame(rows)) == []
    rows[1] = make_row(device="node1:cpu", gbps_median=200.0, gbps_best=200.0 * 1.02)
    (finding,) = slower_nodes(results_frame(rows))
    assert finding.device == "node1:cpu" and "over 2" in finding.evidence


def test_metadata_differing_from_the_majority():
    def node(driver, gen):
        return NodeMeta(gpus=gpus(gpu(0, metadata={"driver_version": driver,
                                                   "pcie_gen_max": gen})))

    nodes = {"a": node("580", 5), "b": node("580", 5), "c": node("550", 4)}
    findings = differing_nodes(nodes)
    assert [(f.device, f.what) for f in findings] == [
        ("c", "node c: driver differs from the fleet"),
        ("c", "node c: PCIe generation (max) differs from the fleet")]
    assert "550 here, 580 on 2 of 3 nodes" in findings[0].evidence


def test_without_a_majority_every_value_is_named_and_no_node_is_blamed():
    def node(*drivers):
        return NodeMeta(gpus=gpus(*(gpu(i, metadata={"driver_version": d})
                                    for i, d in enumerate(drivers))))

    # Nodes, not GPUs, make the majority: a's eight GPUs do not outvote b.
    (finding,) = differing_nodes({"a": node(*["580"] * 8), "b": node("550")})
    assert (finding.device, finding.what) == ("fleet", "driver differs across nodes")
    assert finding.evidence == "550 on b; 580 on a"


def _h2d(node, gbps, size=256 << 20):
    return make_row(case="h2d_pinned", backend="cuda", device=f"{node}:gpu0",
                    device_name="NVIDIA H200", direction="h2d", threads=None,
                    size_bytes=size, gbps_median=gbps, gbps_best=gbps * 1.02)


def test_exactly_10_percent_below_the_median_is_no_finding():
    assert 0.9 * 100.0 == 90.0  # the edge is exact in floating point
    assert slower_nodes(results_frame([_h2d("n0", 100.0), _h2d("n1", 100.0),
                                       _h2d("n2", 90.0)])) == []


def test_nodes_are_compared_at_the_largest_size_not_their_best_row():
    rows = [_h2d("n0", 55.0), _h2d("n1", 55.0), _h2d("n2", 40.0), _h2d("n2", 60.0, size=1 << 20)]
    (finding,) = slower_nodes(results_frame(rows))
    assert finding.device == "n2:gpu0" and "40.0 GB/s" in finding.evidence


def _identity(box: str):
    from bwprof.schema.meta import MachineIdentity

    return MachineIdentity(box=box, box_source="machine_id")


def test_node_findings_name_the_box_where_known():
    """A node whose run recorded a machine identity is named host#box in the findings."""
    from bwprof.analysis.fleet import box_labels, fleet_findings
    from tests.schema.builders import host

    def node(name, box, driver):
        return NodeMeta(host=host(hostname=name, identity=_identity(box) if box else None),
                        gpus=gpus(gpu(0, metadata={"driver_version": driver})))

    nodes = {"a": node("a", "aaaaaaaaaaaa", "580"), "b": node("b", None, "580"),
             "c": node("c", "cccccccccccc", "550")}
    assert box_labels(nodes) == {"a": "a#aaaaaaaaaaaa", "b": "b", "c": "c#cccccccccccc"}
    rows = [make_row(device=f"{name}:cpu", **_gbps(value))
            for name, value in (("a", 300.0), ("b", 295.0), ("c", 200.0))]
    found = [(f.device, f.what) for f in fleet_findings(results_frame(rows), nodes)]
    assert found == [("c:cpu", "node c#cccccccccccc below the fleet median on ddr_triad"),
                     ("c#cccccccccccc", "node c#cccccccccccc: driver differs from the fleet")]
