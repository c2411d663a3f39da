"""The NVML layer without a GPU: fake pynvml scenarios, plus the real pynvml on this machine."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from bwprof import peaks
from bwprof.telemetry import nvml as nvml_module
from bwprof.telemetry.nvml import (
    NVLINK_VERSION_FROM_ENUM,
    Nvml,
    cpu_list_from_mask_words,
    cuda_version_string,
)
from tests.telemetry.fakes import fake_pynvml, field_values, h200_functions, raises

# -- initialisation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (pynvml.NVMLError_LibraryNotFound, "library not found"),
        (pynvml.NVMLError_DriverNotLoaded, "driver not loaded"),
        (pynvml.NVMLError_NoPermission, "no permission"),
        (pynvml.NVMLError_Unknown, "Unknown Error"),
    ],
)
def test_init_failure_turns_telemetry_off_with_one_line_reason(error, words) -> None:
    fake = fake_pynvml(nvmlInit=raises(error), nvmlDeviceGetCount=lambda: 4)
    nvml = Nvml(fake)
    assert nvml.available() is False
    assert nvml.reason is not None
    assert nvml.reason.startswith("NVML unavailable: ")
    assert words in nvml.reason
    assert "\n" not in nvml.reason
    # Everything else degrades to defaults without calling into NVML.
    assert nvml.gpu_count() == 0
    assert nvml.query("nvmlDeviceGetCount", default=-1) == -1
    assert nvml.handle_by_pci_bus_id("0000:1B:00.0") is None
    assert [name for name, _ in fake.calls] == ["nvmlInit"]


def test_missing_pynvml_is_a_reason_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    nvml = Nvml()
    assert nvml.available() is False
    assert "nvidia-ml-py" in (nvml.reason or "")


def test_init_runs_once_and_shutdown_only_when_initialised(h200) -> None:
    nvml, fake = h200
    nvml.shutdown()  # never initialised: nothing to release
    assert nvml.available() and nvml.available()
    assert nvml.reason is None
    assert nvml.gpu_count() == 1
    nvml.shutdown()
    names = [name for name, _ in fake.calls]
    assert names.count("nvmlInit") == 1
    assert names.count("nvmlShutdown") == 1

    failed = fake_pynvml(nvmlInit=raises(pynvml.NVMLError_DriverNotLoaded))
    off = Nvml(failed)
    off.available()
    off.shutdown()
    assert [name for name, _ in failed.calls] == ["nvmlInit"]


def test_real_pynvml_without_driver_is_off_with_a_reason() -> None:
    nvml = Nvml()
    if nvml.available():
        nvml.shutdown()
        pytest.skip("an NVIDIA driver is present on this machine")
    reason = (nvml.reason or "").lower()
    assert "driver" in reason or "library" in reason
    assert "\n" not in reason
    assert nvml.gpu_count() == 0
    assert nvml.device_metadata(None)["peak_hbm_gbps"] is None


# -- query ----------------------------------------------------------------------------------------


def test_query_unsupported_returns_default_and_logs_once(caplog) -> None:
    fake = fake_pynvml(nvmlDeviceGetMemoryBusWidth=raises(pynvml.NVMLError_NotSupported))
    nvml = Nvml(fake)
    with caplog.at_level(logging.INFO, logger="bwprof.nvml"):
        assert nvml.query("nvmlDeviceGetMemoryBusWidth", "h", default=-1) == -1
        assert nvml.query("nvmlDeviceGetMemoryBusWidth", "h") is None
    records = [r for r in caplog.records if "nvmlDeviceGetMemoryBusWidth" in r.getMessage()]
    assert len(records) == 1
    assert records[0].name == "bwprof.nvml"
    assert records[0].levelno == logging.INFO
    assert "Not Supported" in records[0].getMessage()


@pytest.mark.parametrize(
    "error",
    [
        pynvml.NVMLError_FunctionNotFound,
        pynvml.NVMLError_NoPermission,
        pynvml.NVMLError_InvalidArgument,
        pynvml.NVMLError_Unknown,
        pynvml.NVMLError_GpuIsLost,
    ],
)
def test_query_every_nvml_error_gives_default(error) -> None:
    nvml = Nvml(fake_pynvml(nvmlDeviceGetPowerUsage=raises(error)))
    assert nvml.query("nvmlDeviceGetPowerUsage", "h", default=0) == 0


def test_query_logs_each_kind_of_failure_once_and_remembers_a_lost_gpu(caplog) -> None:
    """A link that does not exist (InvalidArgument) must not hide a later, different error
    from the same function; a handle NVML called lost is remembered (the reader warns)."""
    errors = iter([pynvml.NVMLError_InvalidArgument, pynvml.NVMLError_InvalidArgument,
                   pynvml.NVMLError_GpuIsLost])

    def state(*_args: object) -> int:
        raise next(errors)()

    nvml = Nvml(fake_pynvml(nvmlDeviceGetNvLinkState=state))
    with caplog.at_level(logging.INFO, logger="bwprof.nvml"):
        for link in range(3):
            assert nvml.query("nvmlDeviceGetNvLinkState", "h", link) is None
    records = [r for r in caplog.records if "nvmlDeviceGetNvLinkState" in r.getMessage()]
    assert [r.levelno for r in records] == [logging.INFO, logging.INFO]
    assert "GPU is lost" in records[1].getMessage()
    assert nvml.is_lost("h") and not nvml.is_lost("another handle")


def test_query_function_missing_from_pynvml_gives_default(caplog) -> None:
    nvml = Nvml(fake_pynvml())
    with caplog.at_level(logging.INFO, logger="bwprof.nvml"):
        assert nvml.query("nvmlGpmMetricsGet", default="none") == "none"
        assert nvml.query("nvmlGpmMetricsGet", default="none") == "none"
    assert sum("nvmlGpmMetricsGet" in r.getMessage() for r in caplog.records) == 1


def test_query_decodes_bytes_and_passes_other_values_through() -> None:
    nvml = Nvml(fake_pynvml(nvmlSystemGetDriverVersion=lambda: b"550.54.15",
                            nvmlDeviceGetMemoryBusWidth=lambda h: 6144))
    assert nvml.query("nvmlSystemGetDriverVersion") == "550.54.15"
    assert nvml.query("nvmlDeviceGetMemoryBusWidth", "h") == 6144


def test_query_does_not_hide_programming_errors() -> None:
    def broken(_handle: object) -> int:
        raise TypeError("wrong arguments")

    with pytest.raises(TypeError, match="wrong arguments"):
        Nvml(fake_pynvml(nvmlDeviceGetMemoryBusWidth=broken)).query(
            "nvmlDeviceGetMemoryBusWidth", "h"
        )


# -- device lookup --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bus_id", ["0000:1B:00.0", "0000:1b:00.0", "00000000:1B:00.0", "1b:00.0", " 0000:1B:00.0\n"]
)
def test_handle_by_pci_bus_id_accepts_cuda_and_nvml_spellings(h200, bus_id: str) -> None:
    nvml, fake = h200
    assert nvml.handle_by_pci_bus_id(bus_id) == "h200"
    assert ("nvmlDeviceGetHandleByPciBusId", ("00000000:1B:00.0",)) in fake.calls


def test_handle_by_pci_bus_id_unknown_device_is_none_and_bad_text_raises(h200) -> None:
    nvml, _ = h200
    assert nvml.handle_by_pci_bus_id("0000:3D:00.0") is None
    with pytest.raises(ValueError, match="PCI bus id"):
        nvml.handle_by_pci_bus_id("GPU-0")


def test_handle_by_index(h200) -> None:
    nvml, _ = h200
    assert nvml.handle_by_index(0) == "h200"
    assert nvml.handle_by_index(7) is None


# -- metadata -------------------------------------------------------------------------------------


def test_h200_metadata_has_every_field_and_matching_peaks(h200) -> None:
    nvml, _ = h200
    meta = nvml.device_metadata(nvml.handle_by_pci_bus_id("0000:1B:00.0"))
    assert meta == {
        "name": "NVIDIA H200",
        "uuid": "GPU-12345678-1234-1234-1234-123456789abc",
        "serial": "1654123456789",
        "pci_bus_id": "0000:1B:00.0",
        "memory_total_bytes": 150754820096,
        "memory_bus_width_bits": 6016,
        "memory_clock_max_mhz": 3201,
        "sm_clock_max_mhz": 1980,
        "applications_clock_graphics_mhz": 1980,  # at the default: nothing held down
        "applications_clock_mem_mhz": 3201,
        "default_applications_clock_graphics_mhz": 1980,
        "default_applications_clock_mem_mhz": 3201,
        "pcie_gen_current": 5,
        "pcie_gen_max": 5,
        "pcie_gen_max_system": 5,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "numa_node": 1,
        "gpu_numa_node": None,
        "cpu_affinity": "0-31,64-95",
        "driver_version": "580.159.04",
        "cuda_driver_version": "13.0",
        "vbios_version": "96.00.A5.00.1A",
        "ecc_mode_current": True,
        "power_limit_w": 690.0,  # the enforced limit, not the configured one
        "nvlink_links_up": 18,
        "nvlink_links": 18,
        "nvlink_version": 4,
        "nvlink_remotes": ["switch"] * 18,
        "c2c_enabled": None,  # the driver answers NotSupported: a PCIe board
        "c2c_links": None,
        "c2c_link_max_gbps": None,
        "peak_c2c_gbps": None,
        "mig_mode": None,  # the fake has no MIG call: nothing claimed
        "mig_slices": None,
        "cc_mode": None,
        "cc_protected_memory_bytes": None,
        "peak_hbm_gbps": peaks.hbm_peak_gbps(3201, 6016),
        "peak_pcie_gbps": peaks.pcie_peak_gbps(5, 16),
        "peak_nvlink_gbps": peaks.nvlink_peak_gbps(4, 18),
    }
    assert meta["peak_hbm_gbps"] == pytest.approx(4814, rel=1e-3)
    assert meta["peak_pcie_gbps"] == pytest.approx(63.0, rel=1e-3)
    assert meta["peak_nvlink_gbps"] == pytest.approx(450.0)


def test_pcie_gpu_without_newer_functions_uses_fallbacks(tmp_path: Path) -> None:
    """Older driver/pynvml: no GPU-max PCIe gen, no CUDA v2 call, no memory affinity, no NVLink."""
    functions = h200_functions()
    for name in ("nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlSystemGetCudaDriverVersion_v2",
                 "nvmlDeviceGetMemoryAffinity", "nvmlDeviceGetNumaNodeId",
                 "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetC2cModeInfoV1",
                 "nvmlDeviceGetFieldValues"):
        del functions[name]
    functions["nvmlDeviceGetMaxPcieLinkGeneration"] = lambda h: 4
    functions["nvmlSystemGetCudaDriverVersion"] = lambda: 12080
    functions["nvmlDeviceGetNvLinkState"] = raises(pynvml.NVMLError_NotSupported)
    functions["nvmlDeviceGetMemoryBusWidth"] = raises(pynvml.NVMLError_NotSupported)
    functions["nvmlDeviceGetEccMode"] = lambda h: [0, 0]
    functions["nvmlDeviceGetSerial"] = raises(pynvml.NVMLError_NotSupported)  # no inforom
    device = tmp_path / "0000:1b:00.0"
    device.mkdir()
    (device / "numa_node").write_text("0\n")

    nvml = Nvml(fake_pynvml(**functions), sysfs_pci_root=tmp_path)
    meta = nvml.device_metadata("h200")
    assert meta["pcie_gen_max"] == 4
    assert meta["pcie_gen_max_system"] == 4
    assert meta["peak_pcie_gbps"] == pytest.approx(31.5, rel=1e-3)
    assert meta["cuda_driver_version"] == "12.8"
    assert meta["numa_node"] == 0
    assert meta["memory_bus_width_bits"] is None
    assert meta["peak_hbm_gbps"] is None
    assert meta["ecc_mode_current"] is False
    assert meta["serial"] is None
    assert meta["power_limit_w"] == 700.0  # the configured limit, where the enforced is unknown
    assert meta["c2c_enabled"] is None
    assert meta["nvlink_links_up"] == 0
    assert meta["nvlink_version"] is None
    assert meta["peak_nvlink_gbps"] is None


def test_sysfs_numa_minus_one_means_unknown(tmp_path: Path) -> None:
    functions = h200_functions()
    del functions["nvmlDeviceGetMemoryAffinity"]
    device = tmp_path / "0000:1b:00.0"
    device.mkdir()
    (device / "numa_node").write_text("-1\n")
    nvml = Nvml(fake_pynvml(**functions), sysfs_pci_root=tmp_path)
    assert nvml.device_metadata("h200")["numa_node"] is None
    missing = Nvml(fake_pynvml(**functions), sysfs_pci_root=tmp_path / "nowhere")
    assert missing.device_metadata("h200")["numa_node"] is None


def test_nvlink_counts_only_enabled_links(h200) -> None:
    nvml, fake = h200

    def state(_handle: str, link: int) -> int:
        if link >= 12:
            raise pynvml.NVMLError_InvalidArgument()
        return pynvml.NVML_FEATURE_DISABLED if link in (0, 5) else pynvml.NVML_FEATURE_ENABLED

    fake.nvmlDeviceGetNvLinkState = state
    fake.nvmlDeviceGetNvLinkVersion = lambda h, link: (
        pynvml.NVML_NVLINK_VERSION_3_1 if link == 1 else pynvml.NVML_NVLINK_VERSION_INVALID
    )
    meta = nvml.device_metadata("h200")
    assert meta["nvlink_links_up"] == 10 and meta["nvlink_links"] == 12
    assert meta["nvlink_version"] == 3  # read from link 1, the first active one
    # Held against all 12 links the GPU has: two down lower the figure, not the peak.
    assert meta["peak_nvlink_gbps"] == pytest.approx(300.0)


def test_nvlink_states_are_asked_only_for_the_links_the_gpu_has(h200) -> None:
    """pynvml's NVML_NVLINK_MAX_LINKS (36 now) is a bound for every GPU; the link-count field
    is this one's, so an 18-link H200 is not asked about 18 links it does not have."""
    nvml, fake = h200
    assert nvml.device_metadata("h200")["nvlink_links_up"] == 18
    asked = [args[1] for name, args in fake.calls if name == "nvmlDeviceGetNvLinkState"]
    assert asked == list(range(18))

    functions = h200_functions()
    functions["nvmlDeviceGetFieldValues"] = raises(pynvml.NVMLError_NotSupported)
    fake = fake_pynvml(**functions)
    assert Nvml(fake).device_metadata("h200")["nvlink_links_up"] == 18
    asked = [args[1] for name, args in fake.calls if name == "nvmlDeviceGetNvLinkState"]
    assert asked == list(range(pynvml.NVML_NVLINK_MAX_LINKS))


def test_field_values_read_each_value_by_its_type_and_leave_out_refused_ones() -> None:
    power, links, absent = (pynvml.NVML_FI_DEV_POWER_INSTANT,
                            pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, pynvml.NVML_FI_DEV_ECC_CURRENT)
    nvml = Nvml(fake_pynvml(nvmlDeviceGetFieldValues=field_values({power: 512.5, links: 18})))
    assert nvml.field_values("h", [power, links, absent]) == {power: 512.5, links: 18.0}
    refused = Nvml(fake_pynvml(nvmlDeviceGetFieldValues=raises(pynvml.NVMLError_NotSupported)))
    assert refused.field_values("h", [power]) == {}


def test_nvlink_enum_table_matches_pynvml_constants() -> None:
    constants = {
        name: value for name, value in vars(pynvml).items()
        if name.startswith("NVML_NVLINK_VERSION_") and name != "NVML_NVLINK_VERSION_INVALID"
    }
    assert constants, "pynvml no longer defines NVML_NVLINK_VERSION_*"
    for name, value in constants.items():
        major = int(name.removeprefix("NVML_NVLINK_VERSION_").split("_")[0])
        assert NVLINK_VERSION_FROM_ENUM[value] == major, name


# -- pure helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ([0xFFFFFFFF, 0xFFFFFFFF], "0-31,64-95"),
        ([0b1011], "0-1,3"),
        ([1 << 5], "5"),
        ([1 << 63, 1], "63-64"),
        ([0, 0], ""),
        ([], ""),
        ([0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF], "0-127"),
        ([0x5555], "0,2,4,6,8,10,12,14"),
    ],
)
def test_cpu_list_from_mask_words(words: list[int], expected: str) -> None:
    assert cpu_list_from_mask_words(words) == expected


def test_cpu_list_from_32_bit_words() -> None:
    assert cpu_list_from_mask_words([0x80000000, 1], bits_per_word=32) == "31-32"


@pytest.mark.parametrize(
    ("version", "expected"),
    [(12040, "12.4"), (12080, "12.8"), (13000, "13.0"), (11020, "11.2"), (0, None), (None, None)],
)
def test_cuda_version_string(version: int | None, expected: str | None) -> None:
    assert cuda_version_string(version) == expected


def test_module_level_functions_share_one_session(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml(**h200_functions())
    monkeypatch.setattr(nvml_module, "_default", Nvml(fake))
    assert nvml_module.available()
    assert nvml_module.reason() is None
    assert nvml_module.gpu_count() == 1
    handle = nvml_module.handle_by_pci_bus_id("0000:1b:00.0")
    assert nvml_module.device_metadata(handle)["name"] == "NVIDIA H200"
    assert nvml_module.handle_by_index(0) == handle
    assert nvml_module.query("nvmlDeviceGetMemoryBusWidth", handle) == 6016
    nvml_module.shutdown()
    assert [name for name, _ in fake.calls].count("nvmlInit") == 1


def test_a_grace_hopper_host_link_is_c2c_and_gets_no_pcie_peak():
    """GH200: host copies go over NVLink-C2C, so the PCIe peak would mark them invalid."""
    functions = h200_functions()
    functions["nvmlDeviceGetC2cModeInfoV1"] = lambda h: SimpleNamespace(isC2cEnabled=1)
    meta = Nvml(fake_pynvml(**functions)).device_metadata("h200")
    assert meta["c2c_enabled"] is True and meta["peak_pcie_gbps"] is None
    functions["nvmlDeviceGetC2cModeInfoV1"] = lambda h: SimpleNamespace(isC2cEnabled=0)
    meta = Nvml(fake_pynvml(**functions)).device_metadata("h200")
    assert meta["c2c_enabled"] is False and meta["peak_pcie_gbps"] == pytest.approx(63.0, 0.01)


def test_a_grace_hopper_host_link_gets_its_peak_from_nvmls_c2c_fields():
    """GH200: 10 links at 44.7 GB/s each (NVML gives MB/s): 447 GB/s a direction."""
    functions = h200_functions()
    functions["nvmlDeviceGetC2cModeInfoV1"] = lambda h: SimpleNamespace(isC2cEnabled=1)
    functions["nvmlDeviceGetFieldValues"] = field_values({
        pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: 18, pynvml.NVML_FI_DEV_C2C_LINK_COUNT: 10,
        pynvml.NVML_FI_DEV_C2C_LINK_GET_MAX_BW: 44712})
    meta = Nvml(fake_pynvml(**functions)).device_metadata("h200")
    assert (meta["c2c_links"], meta["c2c_link_max_gbps"]) == (10, pytest.approx(44.712))
    assert meta["peak_c2c_gbps"] == pytest.approx(447.12)
    # A driver that gives the count but not the speed: no peak claimed.
    functions["nvmlDeviceGetFieldValues"] = field_values({pynvml.NVML_FI_DEV_C2C_LINK_COUNT: 10})
    meta = Nvml(fake_pynvml(**functions)).device_metadata("h200")
    assert meta["c2c_links"] == 10 and meta["peak_c2c_gbps"] is None


def test_a_gpu_in_mig_mode_records_its_slices_and_no_whole_gpu_hbm_peak():
    functions = h200_functions()
    slices = {0: "mig0", 2: "mig2"}  # index 1 holds no slice

    def slice_by_index(handle, index):
        if index not in slices:
            raise pynvml.NVMLError_NotFound()
        return slices[index]

    functions.update({
        "nvmlDeviceGetMigMode": lambda h: [pynvml.NVML_DEVICE_MIG_ENABLE, 1],
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": slice_by_index,
        "nvmlDeviceGetAttributes": lambda h: SimpleNamespace(multiprocessorCount=16,
                                                             memorySizeMB=17920),
        "nvmlDeviceGetGpuInstanceId": lambda h: {"mig0": 7, "mig2": 9}[h],
        "nvmlDeviceGetComputeInstanceId": lambda h: 0,
        "nvmlDeviceGetUUID": lambda h: f"MIG-{h}" if h != "h200" else "GPU-1",
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(
            total=18 << 30 if h != "h200" else 150754820096),
    })
    meta = Nvml(fake_pynvml(**functions)).device_metadata("h200")
    assert meta["mig_mode"] is True and meta["peak_hbm_gbps"] is None
    assert meta["mig_slices"] == [
        {"uuid": "MIG-mig0", "gpu_instance_id": 7, "compute_instance_id": 0,
         "multiprocessors": 16, "memory_total_bytes": 18 << 30},
        {"uuid": "MIG-mig2", "gpu_instance_id": 9, "compute_instance_id": 0,
         "multiprocessors": 16, "memory_total_bytes": 18 << 30}]
    functions["nvmlDeviceGetMigMode"] = lambda h: [0, 0]
    meta = Nvml(fake_pynvml(**functions)).device_metadata("h200")
    assert meta["mig_mode"] is False and meta["mig_slices"] is None
    assert meta["peak_hbm_gbps"] == pytest.approx(4814, rel=1e-3)


def test_confidential_computing_is_read_from_the_system_state():
    functions = h200_functions()
    functions["nvmlSystemGetConfComputeState"] = lambda: SimpleNamespace(
        environment=2, ccFeature=pynvml.NVML_CC_SYSTEM_FEATURE_ENABLED, devToolsMode=0)
    functions["nvmlDeviceGetConfComputeMemSizeInfo"] = lambda h: SimpleNamespace(
        protectedMemSizeKib=140 << 20, unprotectedMemSizeKib=1 << 20)
    meta = Nvml(fake_pynvml(**functions)).device_metadata("h200")
    assert meta["cc_mode"] is True and meta["cc_protected_memory_bytes"] == 140 << 30
    functions["nvmlSystemGetConfComputeState"] = lambda: SimpleNamespace(
        environment=0, ccFeature=pynvml.NVML_CC_SYSTEM_FEATURE_DISABLED, devToolsMode=0)
    meta = Nvml(fake_pynvml(**functions)).device_metadata("h200")
    assert meta["cc_mode"] is False and meta["cc_protected_memory_bytes"] is None
    functions["nvmlSystemGetConfComputeState"] = raises(pynvml.NVMLError_NotSupported)
    assert Nvml(fake_pynvml(**functions)).device_metadata("h200")["cc_mode"] is None


# -- health: memory errors, repairs, critical Xids ----------------------------------------------

BUS = "00000000:1B:00.0"


def _health_nvml(**gpu: object) -> tuple[Nvml, SimpleNamespace, str]:
    from tests.telemetry.fakes import counter_pynvml

    fake = counter_pynvml({BUS: dict(gpu)})
    nvml = Nvml(fake)
    return nvml, fake, nvml.handle_by_pci_bus_id(BUS)


def test_memory_health_reads_ecc_both_kinds_and_spans_and_the_row_remapper() -> None:
    nvml, fake, handle = _health_nvml(
        ecc={"corrected_volatile": 5, "uncorrected_volatile": 1, "corrected_aggregate": 40,
             "uncorrected_aggregate": 2},
        remapped=[3, 1, 1, 0])
    assert nvml.memory_health(handle) == {
        "ecc_corrected_volatile": 5, "ecc_uncorrected_volatile": 1,
        "ecc_corrected_aggregate": 40, "ecc_uncorrected_aggregate": 2,
        "remapped_rows_corrected": 3, "remapped_rows_uncorrected": 1,
        "remap_pending": True, "remap_failure": False,
        "retired_pages_single_bit": None, "retired_pages_double_bit": None,
        "retired_pages_pending": None,
    }
    # The real calls' arguments: (error type, counter type) from pynvml's constants.
    asked = {args[1:] for name, args in fake.calls if name == "nvmlDeviceGetTotalEccErrors"}
    assert asked == {(t, c) for t in (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                      pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
                     for c in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC)}
    # A part with a row remapper is not asked for retired pages.
    assert not [name for name, _ in fake.calls if "RetiredPages" in name]


def test_memory_health_of_a_gpu_that_supports_none_of_it_is_none_everywhere() -> None:
    nvml, _, handle = _health_nvml()  # ECC off, no remapper, no retirement: NotSupported
    assert set(nvml.memory_health(handle).values()) == {None}


def test_memory_health_falls_back_to_retired_pages_without_a_row_remapper() -> None:
    single = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    double = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    nvml, _, handle = _health_nvml(retired={single: [0x1000, 0x2000], double: [0x3000]},
                                   retired_pending=1)
    health = nvml.memory_health(handle)
    assert (health["retired_pages_single_bit"], health["retired_pages_double_bit"],
            health["retired_pages_pending"]) == (2, 1, True)
    assert health["remap_pending"] is None


def test_xid_events_are_drained_with_a_zero_timeout_and_no_event_is_no_failure(caplog) -> None:
    caplog.set_level(logging.INFO, logger="bwprof.nvml")
    nvml, fake, handle = _health_nvml(xids=[79, 48])
    event_set = nvml.xid_event_set(handle)
    assert event_set is not None
    assert ("nvmlDeviceRegisterEvents", (handle, pynvml.nvmlEventTypeXidCriticalError,
                                         event_set)) in fake.calls
    assert nvml.xid_events(event_set) == [79, 48]
    assert nvml.xid_events(event_set) == []  # NVML's Timeout: none left
    assert "nvmlEventSetWait" not in caplog.text  # a 0 ms wait that found nothing is normal
    nvml.free_event_set(event_set)
    assert fake.event_sets[0]["freed"]


def test_a_gpu_without_xid_events_gets_no_event_set_and_none_is_left_allocated() -> None:
    nvml, fake, handle = _health_nvml(xids=[])
    fake.nvmlDeviceGetSupportedEventTypes = lambda h: pynvml.nvmlEventTypeClock
    assert nvml.xid_event_set(handle) is None
    assert not fake.event_sets  # not even created: the supported types said no
    # A driver that lists the type but refuses the registration: the set is freed again.
    nvml, fake, handle = _health_nvml(xids=[])
    fake.nvmlDeviceRegisterEvents = raises(pynvml.NVMLError_NoPermission)
    assert nvml.xid_event_set(handle) is None
    assert [s["freed"] for s in fake.event_sets] == [True]
    # One that cannot list its types (NotSupported) is tried, and refused: freed too.
    nvml, fake, handle = _health_nvml()
    assert nvml.xid_event_set(handle) is None
    assert [s["freed"] for s in fake.event_sets] == [True]


# Catches: the application clock asked as NVML_CLOCK_SM where application clocks are per
# graphics and memory clock (nvidia-smi -ac MEM,GRAPHICS), and no default recorded
def test_applications_clocks_are_read_per_graphics_and_memory_clock() -> None:
    graphics, sm, mem = pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
    nvml, fake, handle = _health_nvml(app_clocks={graphics: 1005, sm: 1410, mem: 1215},
                                      default_app_clocks={graphics: 1095, mem: 1215})
    assert nvml.applications_clocks(handle) == (1005, 1215)
    assert nvml.applications_clocks(handle, default=True) == (1095, 1215)
    asked = [args[1] for name, args in fake.calls if name == "nvmlDeviceGetApplicationsClock"]
    assert asked == [graphics, mem]  # the SM clock only where graphics is not given
    # A driver that answers only for the SM clock: its figure stands in for graphics.
    nvml, _, handle = _health_nvml(app_clocks={sm: 1410, mem: 1215})
    assert nvml.applications_clocks(handle) == (1410, 1215)
    nvml, _, handle = _health_nvml()
    assert nvml.applications_clocks(handle) == (None, None)
    assert nvml.applications_clocks(handle, default=True) == (None, None)
