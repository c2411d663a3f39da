from bwprof.units import GiB, KiB, MiB, format_bytes


def test_format_bytes():
    assert format_bytes(256 * MiB) == "256 MiB"
    assert format_bytes(3 * GiB // 2) == "1.5 GiB"
    assert format_bytes(4 * KiB) == "4 KiB"
    assert format_bytes(100) == "100 B"
