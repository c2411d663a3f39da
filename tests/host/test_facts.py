from bwprof.host.facts import HostFacts
from bwprof.schema.meta import CacheLevel

CACHES = (CacheLevel(1, "Data", 48 << 10, 2), CacheLevel(1, "Instruction", 32 << 10, 2),
          CacheLevel(2, "Unified", 1 << 20, 2), CacheLevel(3, "Unified", 32 << 20, 1))


def test_cache_level_is_the_smallest_level_that_holds_the_working_set():
    host = HostFacts("cpu", CACHES, "sysfs", 32 << 20)
    assert host.cache_level(4 << 10) == "L1"
    assert host.cache_level(48 << 10) == "L1"
    assert host.cache_level(64 << 10) == "L2"
    assert host.cache_level(32 << 20) == "L3"
    assert host.cache_level(64 << 20) == "DDR"
    assert HostFacts("cpu").cache_level(4 << 10) == ""  # no level known


def test_a_cache_size_not_from_sysfs_is_a_caveat():
    assert HostFacts("cpu", CACHES, "sysfs", 32 << 20).cache_caveat() is None
    assert "CPUID" in (HostFacts("cpu", CACHES, "cpuid", 32 << 20).cache_caveat() or "")
    assert "unknown" in (HostFacts("cpu", (), None, None).cache_caveat() or "")
