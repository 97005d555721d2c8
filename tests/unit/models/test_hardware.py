"""Hardware presets: datasheet peaks per precision (dense), memory in the unit the key names."""

from __future__ import annotations

import pytest

from specnb.models.hardware import PresetError, StepCostError, hardware_presets, load_hardware

GIB = 2**30


def test_gpu_presets_carry_dense_fp8_and_fp4_peaks_from_the_datasheets():
    p = hardware_presets()
    assert p["h100-sxm"].peaks_flop_s == {"bf16": 989e12, "fp8": 1979e12}
    assert p["h200-sxm"].peaks_flop_s == {"bf16": 989e12, "fp8": 1979e12}
    assert p["b200"].peaks_flop_s == {"bf16": 2250e12, "fp8": 4500e12, "fp4": 9000e12}


def test_memory_is_stored_in_gib_as_nvidia_smi_reports_it():
    # nvidia-smi memory.total: 81,559 / 143,771 / 183,359 MiB; the datasheets' "80GB" / "141GB" / "180GB"
    p = hardware_presets()
    for name, mib in (("h100-sxm", 81559), ("h200-sxm", 143771), ("b200", 183359)):
        assert p[name].memory_bytes / GIB == pytest.approx(mib / 1024, abs=0.01), name


def test_an_fp8_target_computes_at_the_fp8_peak():
    h200 = load_hardware("h200-sxm")
    assert h200.flop_s == 989e12 and h200.compute_dtype == "bf16"
    fp8 = h200.for_dtype("fp8")
    assert fp8.flop_s == 1979e12 and fp8.bandwidth_bytes_s == h200.bandwidth_bytes_s
    assert load_hardware("b200").for_dtype("fp4").flop_s == 9000e12
    assert h200.for_dtype("bf16") is h200


def test_missing_precisions_are_refused_in_one_line():
    with pytest.raises(PresetError, match="no dense_fp4_tflop_s.*weight-only FP4"):
        load_hardware("h100-sxm").for_dtype("fp4")
    with pytest.raises(PresetError, match="no dense_fp8_tflop_s"):
        load_hardware("cpu-demo").for_dtype("fp8")
    with pytest.raises(StepCostError, match="compute dtype 'int4'"):
        load_hardware("b200").for_dtype("int4")
