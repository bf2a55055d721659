"""The hardware-output parsers on real samples (tests/data/hw, sources in tests/data/hw/SOURCES.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpckit.hw import (
    XID_CLASSES,
    HwParseError,
    classify_xid,
    parse_dcgmi_diag,
    parse_dcgmi_diag_all,
    parse_ibnetdiscover,
    parse_ibstat,
    parse_ibstat_report,
    parse_ibstatus,
    parse_nvlink_status,
    parse_query_gpu_csv,
    parse_query_q,
    parse_topo_m,
    parse_xid_events,
    read_sysfs_ports,
)

DATA = Path(__file__).parent / "data" / "hw"


def sample(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# --- nvidia-smi -q -------------------------------------------------------------------------------------


def test_query_q_driver535_eight_gpus() -> None:
    gpus = parse_query_q(sample("nvidia-smi/q-8x-h100-80gb-hbm3-driver535.183.01.txt"))
    assert [g.index for g in gpus] == list(range(8))
    assert [g.bus_id for g in gpus][:3] == ["00000000:53:00.0", "00000000:64:00.0", "00000000:75:00.0"]
    first = gpus[0]
    assert first.product_name == "NVIDIA H100 80GB HBM3"
    assert first.uuid == "GPU-566e6f65-c38e-b12f-4824-6944218668b9" and not first.uuid_masked
    assert first.serial == "1655022005478"
    assert (first.driver_version, first.cuda_version) == ("535.183.01", "12.2")
    assert first.persistence_mode is True and first.mig_mode_current is False
    assert (first.ecc_mode_current, first.ecc_mode_pending) == ("Enabled", "Enabled")
    assert first.ecc_aggregate is not None and first.ecc_aggregate.uncorrectable == 0
    assert first.ecc_aggregate.sram_threshold_exceeded is False
    assert first.retired_pages is not None and first.retired_pages.single_bit is None  # N/A on Hopper
    assert first.remapped_rows is not None and first.remapped_rows.histogram["Max"] == 2560
    assert (first.pcie_gen_current, first.pcie_gen_max, first.pcie_width_current) == (5, 5, 16)
    assert [g.pcie_replays for g in gpus] == [120, 111, 58, 60, 63, 93, 69, 78]
    assert (first.temperature_c, first.power_draw_w, first.power_limit_w) == (36.0, 71.97, 700.0)
    assert gpus[2].memory_used_mib == 9221 and gpus[2].power_draw_w == 118.01  # the GPU running a job
    assert first.active_clocks_event_reasons == ("Idle",)


def test_query_q_driver545_clocks_event_reasons_and_unsplit_sram_counters() -> None:
    (gpu,) = parse_query_q(sample("nvidia-smi/q-h100-sxm5-80gb-driver545.txt"))
    assert gpu.index == 0 and gpu.bus_id == "00000000:19:00.0"
    assert gpu.clocks_event_reasons["HW Thermal Slowdown"] is False  # nested under HW Slowdown
    assert len(gpu.clocks_event_reasons) == 9
    assert gpu.ecc_volatile is not None and gpu.ecc_volatile.sram_uncorrectable == 0
    assert (gpu.memory_total_mib, gpu.memory_used_mib, gpu.utilization_gpu_pct) == (81559, 2, 0)
    assert gpu.vbios_version == "96.00.74.00.0D"


def test_query_q_driver590_under_load_masked() -> None:
    (gpu,) = parse_query_q(sample("nvidia-smi/q-h100-80gb-hbm3-driver590-under-load-masked.txt"))
    assert gpu.uuid_masked and gpu.serial == "0000000000000"
    assert (gpu.driver_version, gpu.cuda_version) == ("590.48.01", "13.1")
    assert (gpu.utilization_gpu_pct, gpu.utilization_memory_pct) == (100, 11)
    assert gpu.power_draw_w == 629.45  # "Average Power Draw", what --query-gpu=power.draw reports
    assert (gpu.temperature_c, gpu.memory_temperature_c) == (59.0, 55.0)
    assert gpu.memory_used_mib == 19818
    assert gpu.pcie_replays == 9


def test_query_q_mig_enabled() -> None:
    (gpu,) = parse_query_q(sample("nvidia-smi/q-h100-mig-enabled-driver590-idle-masked.txt"))
    assert gpu.mig_mode_current is True and gpu.mig_mode_pending is True
    assert [m.gpu_instance_id for m in gpu.mig_devices] == [2, 3, 9, 10]
    assert [m.multiprocessors for m in gpu.mig_devices] == [60, 32, 16, 16]
    assert gpu.mig_devices[0].memory_total_mib == 40448
    assert gpu.remapped_rows is None  # "Remapped Rows : N/A" in MIG mode
    assert gpu.utilization_gpu_pct is None  # N/A in MIG mode


def test_query_q_h200() -> None:
    (gpu,) = parse_query_q(sample("nvidia-smi/q-h200-driver590-idle-masked.txt"))
    assert gpu.product_name == "NVIDIA H200" and gpu.memory_total_mib == 143771
    assert gpu.remapped_rows is not None and gpu.remapped_rows.histogram["Max"] == 3072


def test_query_q_ecc_row_remapper_subset_with_bad_gpu() -> None:
    (gpu,) = parse_query_q(sample("nvidia-smi/q-d-ecc-row-remapper-pending-driver550.txt"))
    assert gpu.index is None  # one section of 8 attached GPUs (-i 52:00.0): index unknown
    assert gpu.bus_id == "00000000:52:00.0" and gpu.product_name is None
    assert gpu.ecc_mode_current == "Unknown Error"
    assert gpu.ecc_aggregate is not None and gpu.ecc_aggregate.uncorrectable is None  # all N/A
    rows = gpu.remapped_rows
    assert rows is not None
    assert (rows.correctable, rows.uncorrectable, rows.pending, rows.failure) == (0, 1, True, False)
    assert rows.histogram == {"Max": 2559, "High": 1, "Partial": 0, "Low": 0, "None": 0}


# Not a captured output: the pre-Hopper ECC layout (Single Bit / Double Bit tables with a Total row) as
# drivers before the SRAM/DRAM split print it, reduced to the lines the parser reads.
OLD_ECC_LAYOUT = """
Driver Version                            : 470.82.01
Attached GPUs                             : 1
GPU 00000000:3B:00.0
    Product Name                          : Tesla V100-SXM2-32GB
    Clocks Throttle Reasons
        Idle                              : Not Active
        SW Power Cap                      : Active
    ECC Errors
        Volatile
            Single Bit
                Device Memory             : 3
                Register File             : 1
                Total                     : 4
            Double Bit
                Device Memory             : 0
                Total                     : 0
    Retired Pages
        Single Bit ECC                    : 2
        Double Bit ECC                    : 0
        Pending Page Blacklist            : No
    Power Readings
        Power Draw                        : 55.10 W
        Power Limit                       : 300.00 W
"""


def test_query_q_pre_hopper_layout() -> None:
    (gpu,) = parse_query_q(OLD_ECC_LAYOUT)
    assert gpu.ecc_volatile is not None
    assert (gpu.ecc_volatile.correctable, gpu.ecc_volatile.uncorrectable) == (4, 0)
    assert gpu.ecc_volatile.dram_correctable == 3 and gpu.ecc_aggregate is None
    assert gpu.retired_pages is not None and (gpu.retired_pages.single_bit, gpu.retired_pages.pending) == (
        2,
        False,
    )
    assert gpu.active_clocks_event_reasons == ("SW Power Cap",)  # the old section name
    assert (gpu.power_draw_w, gpu.power_limit_w) == (55.10, 300.0)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("", None, "empty"),
        ("No devices were found\n", 1, "No devices were found"),
        ("Timestamp : x\n    Product Name : y\n", 2, "outside any"),
        ("GPU 00000000:19:00.0\n    FB Memory Usage\n        Total : lots MiB\n", 3, "Total"),
        ("Driver Version : 1\n", None, "no 'GPU <bus id>' section"),
        ("GPU 00000000:19:00.0\n    Persistence Mode : Maybe\n", 2, "Persistence Mode"),
    ],
)
def test_query_q_errors_name_line(text: str, line: int | None, words: str) -> None:
    with pytest.raises(HwParseError) as caught:
        parse_query_q(text)
    assert caught.value.line == line and words in str(caught.value)
    assert caught.value.source == "nvidia-smi -q"


# --- nvidia-smi --query-gpu CSV ------------------------------------------------------------------------


def test_query_gpu_csv_units_in_values() -> None:
    rows = parse_query_gpu_csv(sample("nvidia-smi/query-gpu-csv-2x-rtxpro6000-blackwell-power-ecc.txt"))
    assert len(rows) == 2
    assert rows[0]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (rows[0]["power.draw"], rows[1]["power.draw"], rows[0]["power.limit"]) == (30.39, 28.54, 600.0)
    assert rows[1]["ecc.errors.uncorrected.volatile.total"] == 0.0 and rows[1]["index"] == 1.0


def test_query_gpu_csv_renamed_header_is_normalised() -> None:
    rows = parse_query_gpu_csv(sample("nvidia-smi/query-gpu-csv-2x-rtxpro6000-throttle-reasons-renamed-header.txt"))
    assert rows[0]["clocks_event_reasons.active"] == "0x0000000000000004"
    assert rows[0]["clocks_event_reasons.sw_power_cap"] == "Active"
    # The same values read back with the names the query used (old spelling, noheader output).
    old_names = ["index", "name", "clocks_throttle_reasons.active", "clocks_throttle_reasons.gpu_idle"]
    old_names += [
        "clocks_throttle_reasons.hw_thermal_slowdown",
        "clocks_throttle_reasons.sw_thermal_slowdown",
    ]
    old_names += ["clocks_throttle_reasons.sw_power_cap"]
    body = sample("nvidia-smi/query-gpu-csv-2x-rtxpro6000-throttle-reasons-renamed-header.txt").split("\n", 1)[1]
    assert parse_query_gpu_csv(body, fields=old_names) == rows


def test_query_gpu_csv_all_fields() -> None:
    (row,) = parse_query_gpu_csv(sample("nvidia-smi/query-gpu-csv-allfields-h100-driver590-idle-masked.txt"))
    assert len(row) == 212
    assert row["memory.total"] == 81559.0 and row["power.draw"] == 69.85 and row["edpp_multiplier"] == 100.0
    assert row["remapped_rows.pending"] == "No" and row["remapped_rows.histogram.max"] == 2560.0
    assert row["serial"] == "0000000000000" and row["inforom.oem"] == "2.1" and row["compute_cap"] == "9.0"
    assert row["fan.speed"] is None and row["display_mode"] is None  # [N/A], [...deprecated]
    assert row["platform.chassis_serial_number"] is None  # empty cell
    assert row["fabric.health.summary"] is None  # bare N/A


def test_query_compute_apps_csv() -> None:
    rows = parse_query_gpu_csv(sample("nvidia-smi/query-compute-apps-csv-h100-driver590-load.txt"))
    assert [(r["pid"], r["process_name"], r["used_gpu_memory"]) for r in rows] == [
        (11327.0, "/root/tools/memhog", 2566.0),
        (11328.0, "/root/tools/memhog", 1542.0),
        (11345.0, "./gpu_burn", 15690.0),
    ]


def test_query_gpu_csv_errors() -> None:
    with pytest.raises(HwParseError, match="pass fields="):
        parse_query_gpu_csv("0, NVIDIA H100, 35\n")
    with pytest.raises(HwParseError, match="expected 2 values, got 3") as caught:
        parse_query_gpu_csv("index, name\n0, a, b\n")
    assert caught.value.line == 2


# --- nvidia-smi nvlink / topo -------------------------------------------------------------------------


def test_nvlink_status_h100_and_a100() -> None:
    (h100,) = parse_nvlink_status(sample("nvidia-smi/nvlink-s-h100-driver590-masked.txt"))
    assert h100.name == "NVIDIA H100 80GB HBM3" and len(h100.links) == 18
    assert {link.speed_gbps for link in h100.links} == {26.562} and h100.inactive_links == ()
    a100 = parse_nvlink_status(sample("nvidia-smi/nvlink-status-8x-a100-sxm4-80gb.txt"))
    assert [g.index for g in a100] == list(range(8)) and all(len(g.links) == 12 for g in a100)
    assert a100[7].uuid == "GPU-754035b4-4708-efcd-b261-623aea38bcad"
    assert a100[0].links[11].speed_gbps == 25.0


def test_nvlink_inactive_link_and_garbage() -> None:
    (gpu,) = parse_nvlink_status("GPU 0: X (UUID: GPU-1)\n\t Link 0: 25 GB/s\n\t Link 1: <inactive>\n")
    assert gpu.inactive_links == (1,)
    with pytest.raises(HwParseError, match="unreadable speed") as caught:
        parse_nvlink_status("GPU 0: X (UUID: GPU-1)\n\t Link 0: fast\n")
    assert caught.value.line == 2


def test_topo_m_eight_gpus_six_nics() -> None:
    topo = parse_topo_m(sample("nvidia-smi/topo-m-h100-8gpu-6nic.txt"))
    assert topo.devices[:2] == ("GPU0", "GPU1") and len(topo.devices) == 14
    assert topo.link("GPU0", "NIC0") == "PIX" and topo.link("GPU0", "NIC2") == "NODE"
    assert topo.nvlinks("GPU3", "GPU5") == 18 and topo.nvlinks("GPU0", "NIC1") == 0
    assert topo.link("NIC3", "NIC4") == "PIX"
    assert topo.nic_names == {f"NIC{i}": f"mlx5_{i}" for i in range(6)}
    assert [g.cpu_affinity for g in topo.gpus] == [None] * 4 + ["1"] * 4  # empty cell for GPU0-3
    assert [g.numa_nodes for g in topo.gpus] == [(0,)] * 4 + [(1,)] * 4
    assert all(g.gpu_numa_id is None for g in topo.gpus)


def test_topo_m_ansi_escapes_single_gpu() -> None:
    topo = parse_topo_m(sample("nvidia-smi/topo-m-h100-1gpu-vm-ansi-escapes-driver590.txt"))
    (gpu,) = topo.gpus
    assert topo.devices == ("GPU0",) and topo.link("GPU0", "GPU0") == "X"
    assert gpu.cpu_affinity == "0-19" and gpu.cpus == tuple(range(20)) and gpu.numa_affinity == "0"


def test_topo_m_truncated() -> None:
    text = sample("nvidia-smi/topo-m-h100-8gpu-6nic.txt").split("\nNIC3\t")[0]
    with pytest.raises(HwParseError, match="no matrix row for NIC3, NIC4, NIC5"):
        parse_topo_m(text)


# --- Xid ----------------------------------------------------------------------------------------------


def test_xid_dbe_row_remap_contained() -> None:
    events = parse_xid_events(sample("xid/dmesg-xid48-63-94-dbe-row-remap-driver550.txt"))
    assert [e.xid for e in events] == [48, 63, 94]
    assert {e.bus_id for e in events} == {"0000:52:00"}
    assert events[0].pid is None and events[0].process is None  # pid='<unknown>', name=<unknown>
    assert events[0].uptime_s == 430954.509105
    assert events[1].message.startswith("Row Remapper: New row (0x0000000018f31d80)")
    assert all(e.severity == "hardware" for e in events)


def test_xid_dmesg_T_gsp_timeouts() -> None:
    events = parse_xid_events(sample("xid/dmesg-T-xid119-gsp-rpc-timeout-h100-xe9680.txt"))
    assert [e.xid for e in events] == [119] * 5
    assert [e.process for e in events] == ["nvidia-smi"] * 3 + ["cache_mgr_main", "gpud"]
    assert events[0].pid == 2024380 and events[0].timestamp == "Sun Feb 23 16:24:18 2025"
    assert events[0].gpu_uuid == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
    assert classify_xid(119).severity == "hardware"


def test_xid_decode_iso_application_errors() -> None:
    events = parse_xid_events(sample("xid/dmesg-decode-iso-xid13-xid43-first30lines.txt"))
    assert len(events) == 30 and [e.xid for e in events].count(43) == 2
    xid43 = next(e for e in events if e.xid == 43)
    assert (xid43.pid, xid43.process, xid43.message) == (2815167, "pt_main_thread", "Ch 00000008")
    assert xid43.timestamp == "2025-01-21T02:21:33,502278+00:00"
    assert {e.severity for e in events} == {"application"}


def test_xid_old_forms() -> None:
    (fallen,) = parse_xid_events(sample("xid/syslog-xid79-fallen-off-bus-2016.txt"))
    assert (fallen.xid, fallen.host, fallen.timestamp) == (79, "eduardo-desktop", "Dec  6 17:49:03")
    assert fallen.uptime_s == 8659.726062 and fallen.message == "GPU has fallen off the bus."
    assert fallen.xid_class.catalog_action == "RESTART_BM"
    (halt,) = parse_xid_events(sample("xid/dmesg-xid62-driver340-2014.txt"))
    assert (halt.xid, halt.message, halt.severity) == (62, "12b2(1fa0) 00000000 00000000", "hardware")
    push = parse_xid_events(sample("xid/dmesg-xid32-desktop.txt"))
    assert [(e.xid, e.message) for e in push] == [(32, "Channel ID 00000009 intr 00800000")] * 2
    assert push[0].severity == "disputed"


def test_xid_without_pci_prefix_and_journal_prefix() -> None:
    text = "Oct 15 12:40:10 gpu07 kernel: NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d\n"
    (event,) = parse_xid_events(text)
    assert (event.bus_id, event.xid, event.host) == ("0000:01:00", 13, "gpu07")


def test_xid_malformed_line_strict_and_lenient() -> None:
    text = "[1.0] NVRM: Xid (PCI:0000:01:00): 79, ok\n[2.0] NVRM: Xid (PCI:0000:01:0[3.0] other\n"
    with pytest.raises(HwParseError) as caught:
        parse_xid_events(text)
    assert caught.value.line == 2
    assert [e.xid for e in parse_xid_events(text, strict=False)] == [79]


def test_xid_classes_table() -> None:
    hardware = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120}
    assert {x for x in hardware if XID_CLASSES[x].severity == "hardware"} == hardware
    assert {XID_CLASSES[x].severity for x in (13, 31, 43)} == {"application"}
    assert classify_xid(9999).severity == "disputed"
    assert all(c.action for c in XID_CLASSES.values())


# --- InfiniBand -----------------------------------------------------------------------------------------


def test_ibstat_all_active() -> None:
    cas = parse_ibstat(sample("infiniband/ibstat-h100-node-cx7-ndr400-all-active.txt"))
    assert len(cas) == 12 and cas[0].name == "mlx5_0" and cas[0].ca_type == "MT4129"
    assert cas[0].firmware == "28.39.1002" and cas[0].node_guid == "a088c20300e3142a"
    port = cas[0].ports[0]
    assert (port.state, port.physical_state, port.rate_gbps, port.link_layer) == (
        "ACTIVE",
        "LinkUp",
        400.0,
        "Ethernet",
    )
    assert port.port_guid == "a288c2fffee3142a"
    assert all(p.active for ca in cas for p in ca.ports)


def test_ibstat_some_ports_down() -> None:
    cas = parse_ibstat(sample("infiniband/ibstat-h100-node-cx7-some-ports-down.txt"))
    down = [p for ca in cas for p in ca.ports if not p.active]
    assert len(down) == 3 and {(p.state, p.rate_gbps, p.link_layer) for p in down} == {("DOWN", 40.0, "Ethernet")}
    infiniband = [p for ca in cas for p in ca.ports if p.is_infiniband]
    assert {p.rate_gbps for p in infiniband} == {400.0} and infiniband[0].sm_lid == 334


def test_ibstat_partial_output_keeps_the_panic() -> None:
    report = parse_ibstat_report(sample("infiniband/ibstat-a100-azure-cx6-ibpanic-partial-exit255.txt"))
    assert not report.complete and len(report.cas) == 8
    assert report.errors == ("ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory",)
    assert report.cas[0].ports[0].lid == 13247 and report.cas[0].system_image_guid == "b83fd203006e2704"
    assert report.cas[0].node_guid == "00155dfffe3411eb"


def test_ibstatus() -> None:
    ports = parse_ibstatus(sample("infiniband/ibstatus-a100-azure-hdr200-all-active.txt"))
    assert len(ports) == 9 and ports[0].ca == "mlx5_0" and ports[0].port == 1
    assert (ports[0].lid, ports[0].sm_lid) == (0x33BF, 1)
    assert (ports[0].state, ports[0].physical_state) == ("ACTIVE", "LinkUp")
    assert (ports[0].rate_gbps, ports[0].width_speed) == (200.0, "4X HDR")
    assert ports[0].gid == "fe80:0000:0000:0000:0015:5dff:fd34:11eb"


def test_ib_garbage() -> None:
    with pytest.raises(HwParseError, match="unknown port state") as caught:
        parse_ibstat("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Sleepy\n")
    assert caught.value.line == 3
    with pytest.raises(HwParseError, match='no "CA'):
        parse_ibstat("")
    with pytest.raises(HwParseError, match="unexpected line"):
        parse_ibstatus("hello\n")


def _fake_port(root: Path, ca: str, port: int, files: dict[str, str], counters: dict[str, str]) -> None:
    """A port directory laid out like /sys/class/infiniband/<ca>/ports/<n> (each file ends in a newline)."""
    directory = root / ca / "ports" / str(port)
    (directory / "counters").mkdir(parents=True)
    (directory / "gids").mkdir()
    for name, value in files.items():
        (directory / name).write_text(value + "\n")
    for name, value in counters.items():
        (directory / "counters" / name).write_text(value + "\n")


NDR_PORT = {
    "state": "4: ACTIVE",
    "phys_state": "5: LinkUp",
    "rate": "400 Gb/sec (4X NDR)",
    "link_layer": "InfiniBand",
    "lid": "0x4b",
    "sm_lid": "0x14e",
    "lid_mask_count": "0",
    "gids/0": "fe80:0000:0000:0000:946d:ae03:00cd:e72c",
}


def test_read_sysfs_ports(tmp_path: Path) -> None:
    _fake_port(tmp_path, "mlx5_0", 1, NDR_PORT, {"link_downed": "0", "symbol_error": "12", "port_rcv_errors": "3"})
    down = {
        "state": "1: DOWN",
        "phys_state": "3: Disabled",
        "rate": "40 Gb/sec (4X QDR)",
        "link_layer": "Ethernet",
    }
    _fake_port(tmp_path, "mlx5_1", 1, down, {"link_downed": "7"})
    ports = read_sysfs_ports(tmp_path)
    assert [(p.ca, p.port, p.state) for p in ports] == [("mlx5_0", 1, "ACTIVE"), ("mlx5_1", 1, "DOWN")]
    ndr = ports[0]
    assert (ndr.rate_gbps, ndr.width_speed, ndr.lid, ndr.sm_lid, ndr.lmc) == (400.0, "4X NDR", 75, 334, 0)
    assert ndr.counters == {"link_downed": 0, "port_rcv_errors": 3, "symbol_error": 12}
    assert ndr.gid == "fe80:0000:0000:0000:946d:ae03:00cd:e72c"
    assert (ports[1].physical_state, ports[1].counters["link_downed"]) == ("Disabled", 7)


def test_read_sysfs_ports_missing_root_and_bad_file(tmp_path: Path) -> None:
    assert read_sysfs_ports(tmp_path / "absent") == []
    _fake_port(tmp_path, "mlx5_0", 1, {**NDR_PORT, "rate": "fast"}, {})
    with pytest.raises(HwParseError, match="unreadable rate") as caught:
        read_sysfs_ports(tmp_path)
    assert caught.value.source.endswith("mlx5_0/ports/1/rate")


def test_ibnetdiscover_fat_tree() -> None:
    fabric = parse_ibnetdiscover(sample("infiniband/ibnetdiscover-6switch-edr-fattree-96ca-4xDDR-link.txt"))
    assert (len(fabric.switches), len(fabric.cas), len(fabric.links)) == (6, 96, 144)
    assert fabric.generated == "Mon Dec 18 12:34:08 2023"
    (link,) = [link for link in fabric.links if link.speed != "4xEDR"]  # the one degraded cable
    assert link.speed == "4xDDR"
    assert (link.a, link.a_port, link.b, link.b_port) == ("S-ec0d9a0300ec8200", 11, "S-ec0d9a0300ec8480", 11)
    controller = fabric.nodes["H-506b4b030043f9e2"]
    assert (controller.description, controller.lid, controller.ports) == ("controller mlx5_0", 34, 1)
    leaf = fabric.nodes["S-ec0d9a0300ec8240"]
    assert (leaf.kind, leaf.lid, leaf.ports, leaf.description) == (
        "Switch",
        48,
        36,
        "SwitchIB Mellanox Technologies",
    )
    assert fabric.nodes["H-08c0eb0300ddc0f6"].guid == "08c0eb0300ddc0f6"  # leading zero dropped in sysimgguid
    uplinks = [end for end in fabric.neighbours(leaf.id) if fabric.nodes[end[1]].kind == "Switch"]
    assert len(uplinks) == 12 and len(fabric.neighbours(leaf.id)) == 36


def test_ibnetdiscover_inconsistent_link() -> None:
    text = (
        'Switch\t2 "S-01"\t\t# "leaf" base port 0 lid 1 lmc 0\n'
        '[1]\t"H-02"[1](2) \t\t# "n1 HCA-1" lid 2 4xEDR\n'
        'Ca\t1 "H-02"\t\t# "n1 HCA-1"\n'
        '[1](2) \t"S-01"[2]\t\t# lid 2 lmc 0 "leaf" lid 1 4xEDR\n'
    )
    with pytest.raises(HwParseError, match=r"S-01\[1\] -> H-02\[1\], but H-02\[1\] -> S-01\[2\]"):
        parse_ibnetdiscover(text)


# --- dcgmi diag ---------------------------------------------------------------------------------------


def test_dcgmi_printed_twice_collapses() -> None:
    text = sample("dcgmi/diag-r3-dcgm3.3.9-2gpu-rtxpro6000-printed-twice.txt")
    assert len(parse_dcgmi_diag_all(text)) == 2
    diag = parse_dcgmi_diag(text)
    assert diag.metadata["DCGM Version"] == "3.3.9" and diag.metadata["GPU Device IDs Detected"] == "2bb5,2bb5"
    assert len(diag.tests) == 15 and diag.passed
    memory = diag.test("GPU Memory")
    assert memory is not None and (memory.category, memory.result, memory.all_gpus) == (
        "Hardware",
        "Skip",
        True,
    )
    assert [t.name for t in diag.tests if t.category == "Deployment"][-1] == "Inforom"


def test_dcgmi_4_per_gpu_rows() -> None:
    diag = parse_dcgmi_diag(sample("dcgmi/diag-r3-dcgm4.0.0-4gpu-per-gpu-lines-nvidia-docs.txt"))
    assert [t.name for t in diag.tests] == [
        "software",
        "memory",
        "diagnostic",
        "pcie",
        "memory_bandwidth",
        "targeted_stress",
        "targeted_power",
    ]
    assert all(dict(t.gpu_results) == {0: "Pass", 1: "Pass", 2: "Pass", 3: "Pass"} for t in diag.tests)
    assert diag.metadata["Driver Version Detected"] == "550.90.07"


def test_dcgmi_failure_with_wrapped_error() -> None:
    diag = parse_dcgmi_diag(sample("dcgmi/diag-r4-persistence-mode-fail-memtest-pre-metadata.txt"))
    assert diag.metadata == {} and not diag.passed
    (failed,) = diag.failed
    assert failed.name == "Persistence Mode"
    (message,) = failed.messages
    assert message.kind == "Error"
    assert message.text == (
        "Persistence mode for GPU 0 is currently disabled. The DCGM diagnostic requires peristence mode "
        'to be enabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.'
    )
    memtest = diag.test("Memtest")
    assert memtest is not None and (memtest.result, memtest.all_gpus) == ("Pass", True)


def test_dcgmi_mixed_per_gpu_results_and_conflicting_reports() -> None:
    table = (
        "| Diagnostic | Result |\n"
        "|-----  Stress  ----+----|\n"
        "| Memory Bandwidth | Fail - GPU: 2 |\n"
        "|                  | Pass - GPUs: 0, 1, 3 |\n"
        "| Warning          | GPU 2 bandwidth too low |\n"
    )
    (test,) = parse_dcgmi_diag(table).tests
    assert test.result == "Fail" and dict(test.gpu_results) == {2: "Fail", 0: "Pass", 1: "Pass", 3: "Pass"}
    assert test.messages[0].text == "GPU 2 bandwidth too low"
    with pytest.raises(HwParseError, match="several different"):
        parse_dcgmi_diag(table + table.replace("Fail - GPU: 2", "Pass - GPU: 2"))
    with pytest.raises(HwParseError, match="unknown result") as caught:
        parse_dcgmi_diag(table.replace("Fail - GPU: 2", "Flaky"))
    assert caught.value.line == 3


def test_read_sysfs_ports_unreadable_attribute_is_left_out(tmp_path: Path) -> None:
    """A driver refusing a read (EINVAL on a RoCE port; a directory stands in for it here) costs that value,
    not the port; a missing state file is an error."""
    _fake_port(tmp_path, "mlx5_0", 1, {k: v for k, v in NDR_PORT.items() if k != "rate"}, {})
    (tmp_path / "mlx5_0" / "ports" / "1" / "rate").mkdir()
    (port,) = read_sysfs_ports(tmp_path)
    assert (port.state, port.rate_gbps) == ("ACTIVE", None)
    (tmp_path / "mlx5_0" / "ports" / "1" / "state").unlink()
    with pytest.raises(HwParseError, match="cannot read"):
        read_sysfs_ports(tmp_path)


# --- /proc/meminfo, and what importing one parser costs -----------------------------------------------


def test_meminfo_total_in_mib() -> None:
    from hpckit.hw.meminfo import mem_total_mb

    assert mem_total_mb("MemTotal:       24684100 kB\nMemFree:        20000000 kB\n") == 24684100 // 1024
    with pytest.raises(HwParseError, match=r"/proc/meminfo: no 'MemTotal: N kB' line"):
        mem_total_mb("MemFree: 1 kB\n")


def test_one_parser_imports_only_its_module() -> None:
    """The quick health tier reads /proc/meminfo on every node; the GPU and InfiniBand parsers load only where
    a check asks for them."""
    code = "import sys, hpckit.hw.meminfo; print(sorted(m for m in sys.modules if m.startswith('hpckit.hw.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['hpckit.hw.errors', 'hpckit.hw.meminfo']"
