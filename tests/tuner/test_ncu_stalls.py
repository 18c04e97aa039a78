"""benchmarks/ncu_stalls.py on a small CSV in Nsight Compute's source-page form (no GPU): lines are
classed by opcode past a predicate guard, samples, stall reasons and shared wavefronts summed per
class, and the table lists the classes by samples."""

from __future__ import annotations

from pathlib import Path

from benchmarks.ncu_stalls import opclass, summarize, table

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
          '"L1 Wavefronts Shared","L1 Wavefronts Shared Excessive","stall_short_sb","stall_wait",'
          '"stall_short_sb (Not Issued)"')
ROWS = [
    '"0x10","      PRMT R1, R2, 0x5410, R3","28","100","0","0","20","10","20"',
    '"0x20","      @!P0 LDS.U8 R4, [R5+0x46]","12","50","400","350","2","10","2"',
    '"0x30","      STS.128 [R6], R8","8","50","200","100","0","8","0"',
    '"0x40","      PRMT R9, R2, 0x7632, R3","10","100","0","0","5","5","5"',
    '"0x50","      HGMMA.64x16x16.F32.BF16 R24, gdesc[UR4], R24","42","20","800","0","0","40","0"',
]


def test_lines_are_summed_by_class(tmp_path: Path) -> None:
    assert opclass("      PRMT R1, R2, 0x5410, R3") == "conversion"  # not read as a predicate (P...)
    assert opclass("@!P0 LDS.U8 R4, [R5]") == "ld.shared" and opclass("@P1 BRA 0x100") == "branch"
    assert opclass("UIADD3 UR4, UR4, 0x1, URZ") == "uniform" and opclass("XYZ R1") == "other"
    csv = tmp_path / "k.sass.csv"
    csv.write_text('"Kernel Name","decode_wgmma_kernel",\n' + "\n".join([HEADER] + ROWS) + "\n")
    reasons, by = summarize(csv)
    assert reasons == ["stall_short_sb", "stall_wait"]  # the "(Not Issued)" copies are left out
    assert by["conversion"]["instructions"] == 2 and by["conversion"]["samples"] == 38
    assert by["conversion"]["stall_short_sb"] == 25 and by["ld.shared"]["smem excess"] == 350
    lines = table(reasons, by, "k").splitlines()
    body = [line for line in lines if line.startswith("| ") and not line.startswith("| class")]
    assert [line.split("|")[1].strip() for line in body] == ["wgmma", "conversion", "ld.shared", "st.shared"]
    assert "| conversion | 2 | 200 | 38 | 38% | short_sb 25, wait 15 | 0 (0) |" in lines
    assert "| ld.shared | 1 | 50 | 12 | 12% | wait 10, short_sb 2 | 400 (350) |" in lines
