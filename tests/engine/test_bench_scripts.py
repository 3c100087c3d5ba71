"""The bench/ scripts' parsers: llama.cpp log lines and tool output (no tools are run)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def common() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        import _common

        yield _common
    finally:
        sys.path.remove(str(BENCH))


LOG = """\
load_tensors:   CPU_Mapped model buffer size =   235.16 MiB
load_tensors:   CPU_REPACK model buffer size =    12.66 MiB
llama_context:        CPU  output buffer size =     1.00 MiB
llama_kv_cache:        CPU KV buffer size =    24.00 MiB
llama_kv_cache:        CPU KV buffer size =    15.00 MiB
sched_reserve:        CPU compute buffer size =    26.77 MiB
output_reserve: reallocating output buffer from size 1.00 MiB to 5.00 MiB
"""


def test_parse_buffers(common: ModuleType) -> None:
    b = common.parse_buffers(LOG)
    assert b["model"] == pytest.approx(247.82)
    assert b["KV"] == pytest.approx(39.0)
    assert b["compute"] == pytest.approx(26.77)
    assert b["output"] == pytest.approx(1.0)
    assert b["total"] == pytest.approx(247.82 + 39.0 + 26.77 + 1.0)
    assert b["output_grown_to"] == pytest.approx(5.0)
    assert common.parse_buffers("nothing here") == {"total": 0.0}


def test_speculative_simple_lines(common: ModuleType) -> None:
    import vs_llamacpp as v

    text = (
        "0.33.447.435 I encoded  156 tokens in    4.059 seconds, speed:   38.433 t/s\n"
        "0.33.447.459 I decoded   37 tokens in   22.246 seconds, speed:    1.663 t/s\n"
        "0.33.447.817 I n_drafted = 29\n0.33.447.836 I n_accept  = 28\n"
    )
    m = v._DECODED_RE.search(text)
    assert m is not None and (m.group(1), m.group(2)) == ("37", "22.246")
    enc = v._ENCODED_RE.search(text)
    assert enc is not None and enc.group(1) == "156"
    d, a = v._DRAFTED_RE.search(text), v._ACCEPT_RE.search(text)
    assert d is not None and a is not None and (d.group(1), a.group(1)) == ("29", "28")


def test_disturbed_trusts_the_cpu_time_measured_during_the_run(common: ModuleType) -> None:
    """The load average before a run holds the previous benchmark's own threads; where
    other processes' CPU time during the run was measured, it decides."""
    busy_before = {"loadavg": [1.9, 1.9, 1.9], "cores": 2, "disturbed": True}
    quiet_before = {"loadavg": [0.1, 0.1, 0.1], "cores": 2, "disturbed": False}
    assert not common.disturbed(busy_before, {"other_cores": 0.01, "disturbed": False})
    assert common.disturbed(quiet_before, {"other_cores": 0.9, "disturbed": True})
    # not measured (no /proc/stat): the load average is all there is
    assert common.disturbed(busy_before, {"other_cores": None, "disturbed": False})
    note = common.OtherCpu().note()
    assert set(note) == {"other_cores", "disturbed"}
    assert note["other_cores"] is None or note["other_cores"] >= 0.0


def test_the_disturbed_line_says_what_was_measured(common: ModuleType) -> None:
    before = {"loadavg": [1.9, 1.9, 1.9], "cores": 2, "disturbed": True}
    line = common.disturbed_line(before, {"other_cores": 0.9, "disturbed": True})
    assert line.startswith("DISTURBED:") and "0.9 of 2 cores" in line
    assert "unmeasured" in common.disturbed_line(before, {"other_cores": None, "disturbed": False})
