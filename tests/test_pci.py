import pytest

from bwprof.pci import parse_pci_bus_id, same_device


def test_parse_pci_bus_id_spellings() -> None:
    address = parse_pci_bus_id("00000000:1B:00.0")
    assert address == (0, 0x1B, 0, 0)
    assert address.cuda() == "0000:1B:00.0"
    assert address.nvml() == "00000000:1B:00.0"
    assert address.sysfs() == "0000:1b:00.0"
    assert parse_pci_bus_id("10000:e1:1f.7").sysfs() == "10000:e1:1f.7"  # VMD domains


def test_a_malformed_bus_id_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a PCI bus id"):
        parse_pci_bus_id("gpu0")


@pytest.mark.parametrize(("x", "y", "same"), [
    ("00000000:1B:00.0", "0000:1b:00.0", True),
    ("1B:00.0", "0000:1B:00.0", True),
    ("0000:1B:00.0", "0000:1C:00.0", False),
    (None, "0000:1B:00.0", False),
    ("switch", "0000:1B:00.0", False),
])
def test_same_device_whatever_the_spelling(x, y, same) -> None:
    assert same_device(x, y) is same
