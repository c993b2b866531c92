"""Every shipped CUDA kernel file compiles for sm_90 with the run-time options (CPU CI: nvcc
only, no GPU). Skipped where nvcc is absent. The files compile in parallel, one nvcc each."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from metrale.cuda import configs, tile
from metrale.cuda.q2_0 import dec_kernel_name
from metrale.cuda.runtime import COMPILE_OPTIONS, KERNEL_DIR, file_arch, kernel_files, source

NVCC = shutil.which("nvcc")


def _compile(cu: str, out_dir: str) -> tuple[str, int, str]:
    """nvcc over the text NVRTC compiles (headers inlined, instantiations generated)."""
    src = Path(out_dir) / cu
    src.write_text(source(cu))
    arch = file_arch(cu, "sm_90")  # sm_90a files: -gencode (nvcc 13.0's -arch=sm_90a also runs sm_90)
    cmd = [
        NVCC or "nvcc",
        f"-gencode=arch=compute_{arch[3:]},code={arch}",
        *COMPILE_OPTIONS,
        "-Xptxas=-warn-spills",
        "-cubin",
        "-o",
        str(Path(out_dir) / f"{cu}.cubin"),
        str(src),
    ]
    # generous: on a loaded 2-core CI machine one file has taken over 300 s (nvfp4_mma.cu)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    return cu, p.returncode, p.stdout + p.stderr


def test_kernel_files_exist() -> None:
    assert kernel_files(), f"no .cu files in {KERNEL_DIR}"


def test_kernel_sources_need_no_system_headers() -> None:
    """NVRTC (the run-time compiler) has no system headers: only local includes, inlined."""
    for cu in kernel_files():
        text = source(cu)
        assert "#include <" not in text, f"{cu}: system header include"
        assert '#include "' not in text.replace("// ", ""), f"{cu}: a local include was not inlined"


@pytest.fixture(scope="module")
def compiled() -> list[tuple[str, int, str]]:
    """Every kernel file through nvcc once: (file, exit code, compiler log)."""
    if NVCC is None:
        pytest.skip("nvcc not found")
    files = kernel_files()
    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor(max_workers=max(1, len(files))) as ex:
        return list(ex.map(lambda cu: _compile(cu, d), files))


def test_every_kernel_file_compiles_for_sm90(compiled: list[tuple[str, int, str]]) -> None:
    failed = [f"{cu} (exit {rc}):\n{log[-3000:]}" for cu, rc, log in compiled if rc != 0]
    assert not failed, "nvcc failed:\n" + "\n".join(failed)


#: ptxas's notes that it serialised a kernel's wgmma (each mma_async waited for at once: no MMA
#: overlaps the epilogue): C7510 a call in the kernel, C7514 / C7515 an accumulator register read
#: or written by other instructions while its wgmma is in flight.
SERIALISED = re.compile(r"\(C751[0-9]\).*")
#: Kernels that must not spill registers (-warn-spills names them): the fast chain decode kernels,
#: issue-bound at one row (docs/performance-log.md "2026-12-07 (c)"), whose ring loop holds every
#: live value in registers.
NO_SPILL = re.compile(r"nvfp4_a(16|4)fc_r\d+")
SPILLED = re.compile(r"spilled to local memory in function '(\w+)'")


def test_ptxas_keeps_the_hot_kernels(compiled: list[tuple[str, int, str]]) -> None:
    """ptxas keeps every warpgroup-MMA pipeline of the sm_90a files (nvfp4_wgmma.cu's tiles,
    w8a8_wgmma.cu): a kernel must hold no call (tile.cuh's tile_slow is inlined for this) nor
    touch an accumulator of a wgmma in flight; and it spills no register of NO_SPILL's kernels.
    (Both checks in one test: each test of the compiled files can cost an xdist worker its own
    compile of every file.)"""
    notes = [f"{cu}: {m.group(0)}" for cu, _, log in compiled for m in SERIALISED.finditer(log)]
    assert not notes, "ptxas serialised wgmma:\n" + "\n".join(notes)
    spills = [
        f"{cu}: {m.group(1)}"
        for cu, _, log in compiled
        for m in SPILLED.finditer(log)
        if NO_SPILL.fullmatch(m.group(1))
    ]
    assert not spills, "spills in kernels that must keep registers:\n" + "\n".join(spills)


def test_instantiations_come_from_the_configuration_tables() -> None:
    """Every kernel file states no instantiation itself: each ``MACRO(args)`` line of the built
    source is one that configs.py generates, and each table's lines all appear."""
    for cu in kernel_files():
        raw = (KERNEL_DIR / cu).read_text()
        built = source(cu).splitlines()
        for macro in re.findall(r"^// @instances ([A-Z0-9_]+)", raw, re.MULTILINE):
            want = configs.instances(macro)
            assert [ln for ln in built if re.match(rf"^{macro}\(", ln)] == want, (cu, macro)
        hand = re.search(r"^[A-Z0-9_]+\(.*\)\s*$", raw, re.MULTILINE)
        assert not hand, f"{cu}: a hand-written instantiation"


def test_launch_constants_come_from_the_configuration() -> None:
    """The constants a kernel file and its launcher share are stated once, in configs.py: every
    built source holds configs.defines(GROUP) where its text (headers inlined) had
    ``// @defines GROUP``, no kernel file ``#define``s one of those names itself, and
    the launchers (metrale/cuda/mma.py, fp8_bf16.py, nvfp4.py, q2_0.py) use the same values."""
    from metrale.cuda import fp8_bf16, mma, nvfp4, q2_0

    names: set[str] = set()
    users = []
    for cu in kernel_files():
        built = source(cu)
        for group in re.findall(r"^// @defines ([A-Z0-9_]+)", runtime_text(cu), re.MULTILINE):
            want = configs.defines(group)
            assert [ln for ln in built.splitlines() if ln in want] == want, (cu, group)
            names |= {ln.split()[1] for ln in want}
            users.append(cu)
    assert {"nvfp4_mma.cu", "q2_0_mma.cu", "fp8_bf16_mma.cu", "fp8_bf16_gemv.cu"} <= set(users)
    assert {"nvfp4_gemv.cu", "nvfp4_a4.cu", "q2_0_dec.cu"} <= set(users)
    for f in KERNEL_DIR.iterdir():
        hand = [n for n in names if re.search(rf"^\s*#\s*define\s+{n}\b", f.read_text(), re.MULTILINE)]
        assert not hand, f"{f.name}: #define {hand} (configs.py states it)"
    shared = (mma.MMA_WARPS, mma.MMA_RUN, mma.GEMM_WARPS)
    assert shared == (configs.MMA_WARPS, configs.MMA_RUN, configs.GEMM_WARPS)
    assert fp8_bf16.MMA_WARPS == configs.FP8_BF16_MMA_WARPS
    assert (nvfp4.WARPS, nvfp4.THREADS) == (configs.NVFP4_WARPS, 32 * configs.NVFP4_WARPS)
    assert (nvfp4.FAST_THREADS, nvfp4.FAST_SLOT) == (configs.NVFP4_FAST_THREADS, configs.NVFP4_FAST_SLOT)
    assert q2_0.DEC_WARPS == configs.Q2_0_DEC_WARPS


def test_fast_ring_early_is_one_bit_per_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """configs.NVFP4_FAST_RING_EARLY names (mode, rows) kernels; nvfp4.cuh's FAST_RING_EARLY has
    bit 4 MODE + R set for each (a16: MODE 0, a4: MODE 1), and a kernel that is not built is
    refused by name."""
    from metrale.cuda import nvfp4

    assert configs.fast_ring_early_mask(frozenset()) == 0
    assert configs.fast_ring_early_mask(frozenset({("a16", 1), ("a4", 1), ("a4", 2)})) == 2 + 32 + 64
    assert configs.fast_ring_early_mask(configs.NVFP4_FAST_KERNELS) == 0b1_1111_1110  # bits 1..8
    with pytest.raises(ValueError, match=r"no fast kernel \[\('a16', 5\)\]"):
        configs.fast_ring_early_mask(frozenset({("a16", 5)}))
    monkeypatch.setattr(configs, "NVFP4_FAST_RING_EARLY", frozenset({("a4", 3)}))
    for cu in (nvfp4.A16_FILE, nvfp4.A4_FILE):
        assert "#define FAST_RING_EARLY 128" in source(cu).splitlines(), cu


def runtime_text(cu: str) -> str:
    """The file's text and every local header it includes, as written (no lines generated)."""
    text, seen, todo = "", set(), [cu]
    while todo:
        name = todo.pop()
        if name in seen or not (KERNEL_DIR / name).is_file():
            continue
        seen.add(name)
        body = (KERNEL_DIR / name).read_text()
        text += body
        todo += re.findall(r'^\s*#\s*include\s+"([^"]+)"', body, re.MULTILINE)
    return text


def test_launchers_ask_for_kernels_the_files_define(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel names the launchers build from the tables are defined in the built sources."""
    from metrale.cuda import q2_0

    built = {cu: source(cu) for cu in kernel_files()}
    chain_q2: list[tuple[str, str]] = []  # q2c_dec_*, and q2cp_dec_* where built
    for pipe in ((), configs.Q2_0_CHAIN_PIPE_ROWS_BUILT):
        monkeypatch.setattr(q2_0, "CHAIN_PIPE_ROWS", pipe)
        chain_q2 += [
            ("q2_0_dec.cu", dec_kernel_name(v, r, k, chain=True)[0])
            for r, _, v in configs.Q2_0_DEC_ROUTE
            for k in (4096, 12288, 131072)
        ]
    names = (
        [("nvfp4_gemv.cu", f"nvfp4_a16f_r{r}") for r in configs.NVFP4_FAST_DEPTH]
        + [("nvfp4_a4.cu", f"nvfp4_a4f_r{r}") for r in configs.NVFP4_A4F_DEPTH]
        + [
            ("nvfp4_mma.cu", f"{p}_mma_nt{nt}_a")
            for p, _ in configs.NVFP4_MMA_MODES
            for nt in configs.NVFP4_MMA_TILES
        ]
        + [
            ("nvfp4_mma.cu", f"{p}_gemm_nt{nt}_d{d}_b{b}_u")
            for p, _ in configs.NVFP4_MMA_MODES
            for d, (nt, b) in [*configs.NVFP4_GEMM_TILES.items(), *configs.NVFP4_GEMM_SMALL_TILES.items()]
        ]
        + [("q2_0_mma.cu", f"{p}_mma_nt{nt}_a") for p in ("q2", "q2h") for nt in configs.NVFP4_MMA_TILES]
        + [("q2_0_gemv.cu", f"q2_0_gemv_r{r}") for r in configs.Q2_0_TIERS]
        + [
            ("q2_0_dec.cu", dec_kernel_name(v, r, k)[0])
            for v in configs.Q2_0_DEC_VARIANTS
            for r in range(1, configs.Q2_0_DEC_MAX_ROWS + 1)
            for k in (4096, 131072)
        ]
        + chain_q2
        + [("fp8_bf16_gemv.cu", f"{p}_gemv_r{r}") for p in ("fp8", "bf16") for r in configs.FP8_BF16_TIERS]
        + [("fp8_bf16_gemv.cu", d.name(p, r)) for p, r, d in configs.fp8_bf16_dec_instances()]
        + [("w8a8.cu", f"w8a8_mma_r{r}_w{w}") for r in configs.W8A8_MMA_TIERS for w in configs.W8A8_MMA_WARPS]
        + [
            (tile.WG_FILE, f"{f.wg_prefix}_gemm_f{nf}")
            for f in (tile.NVFP4, tile.NVFP4_A4, tile.Q2_0)
            for nf in tile.WG_FRAGS
        ]
        + [
            (tile.WG_FILE, f"{f.chain_prefix}_gemm_f{nf}")
            for f in (tile.NVFP4, tile.NVFP4_A4, tile.Q2_0)
            for nf in tile.CHAIN_FRAGS
        ]
    )
    for cu, name in names:
        macro_lines = [ln for ln in built[cu].splitlines() if re.match(r"^[A-Z0-9_]+\(", ln)]
        assert macro_lines, cu
        # the macro pastes the name from its first arguments: regenerate it the same way
        assert instantiation_of(cu, name) in macro_lines, (cu, name)


def instantiation_of(cu: str, name: str) -> str:
    """The instantiation line that defines kernel ``name`` of ``cu`` (by the macros' naming)."""
    for macro in re.findall(r"^// @instances ([A-Z0-9_]+)", (KERNEL_DIR / cu).read_text(), re.MULTILINE):
        for ln in configs.instances(macro):
            args = [a.strip() for a in ln[ln.index("(") + 1 : -1].split(",")]
            if name in _pasted(macro, args):
                return ln
    return f"<no instantiation of {name}>"


def _pasted(macro: str, a: list[str]) -> tuple[str, ...]:
    """The kernel names a macro's token pasting makes from its arguments (as the .cu defines):
    one, or the Q2_0 macros' two (the s8 and f16 families)."""
    named = {
        "NVFP4_A16": lambda: f"nvfp4_a16_r{a[0]}_{a[2]}",
        "NVFP4_A16F": lambda: f"nvfp4_a16f_r{a[0]}",
        "NVFP4_A4": lambda: f"nvfp4_a4_r{a[0]}_{a[2]}",
        "NVFP4_A4F": lambda: f"nvfp4_a4f_r{a[0]}",
        "NVFP4_MMA": lambda: f"{a[0]}_mma_nt{a[2]}_{a[4]}",
        "NVFP4_GEMM": lambda: f"{a[0]}_gemm_nt{a[2]}_d{a[3]}_b{a[4]}_{a[6]}",
        "NVFP4_TILE": lambda: f"w4a16b_gemm_f{a[0]}",
        "Q2_TILE": lambda: f"q2a16b_gemm_f{a[0]}",
        "NVFP4_WGMMA_TILE": lambda: f"w4a16w_gemm_f{a[0]}",
        "NVFP4_A4_WGMMA_TILE": lambda: f"w4a4w_gemm_f{a[0]}",
        "Q2_WGMMA_TILE": lambda: f"q2a16w_gemm_f{a[0]}",
        "NVFP4_CHAIN_TILE": lambda: f"w4c_gemm_f{a[0]}",
        "Q2_CHAIN_TILE": lambda: f"q2c_gemm_f{a[0]}",
        "FP8_CHAIN_TILE": lambda: f"w8c_gemm_f{a[0]}",
        "Q2_GEMV": lambda: f"q2_0_gemv_r{a[0]}",
        "Q2_DEC": lambda: f"{a[6]}_dec_r{a[0]}_c{a[1]}_d{a[2]}_{a[4]}",
        "FP8_BF16_GEMV": lambda: f"{a[0]}_r{a[2]}",
        "FP8_BF16_DEC": lambda: f"{a[0]}_dec_r{a[2]}_c{a[3]}_w{a[4]}_p{a[5]}_{a[7]}",
        "W8A8_GEMV": lambda: f"w8a8_gemv_r{a[0]}",
        "W8A8_MMA": lambda: f"w8a8_mma_r{a[0]}_w{a[3]}",
        "Q2_MMA": lambda: (f"q2_mma_nt{a[0]}_{a[2]}", f"q2h_mma_nt{a[0]}_{a[2]}"),
        "Q2_GEMM": lambda: (
            f"q2_gemm_nt{a[0]}_d{a[1]}_b{a[2]}_{a[4]}",
            f"q2h_gemm_nt{a[0]}_d{a[1]}_b{a[2]}_{a[4]}",
        ),
        "FP8_BF16_MMA": lambda: f"{a[0]}_nt{a[2]}",
        "FP8_BF16_GEMM": lambda: f"fp8_bf16_gemm_nt{a[0]}_d{a[1]}_b{a[2]}_p",
        "FP8_BF16_GEMM_LATE": lambda: f"fp8_bf16_gemm_nt{a[0]}_d{a[1]}_b{a[2]}_l",
        "BF16_CHAIN_GEMM": lambda: f"bf16c_gemm_nt{a[0]}_d{a[1]}_b{a[2]}_{a[3]}",
        "W8A8_GEMM": lambda: f"w8a8_gemm_{a[0]}x{a[1]}",
        "W8A8_WGMMA": lambda: f"w8a8_wgmma_{a[0]}x{a[1]}",
        "W8A8_WGMMA_SK": lambda: f"w8a8_wgmma_sk_n{a[1]}",
        "W8A8_TMA": lambda: f"w8a8_tma_n{a[0]}",
    }.get(macro, lambda: f"<{macro}: naming not stated here>")()
    return named if isinstance(named, tuple) else (named,)


def test_arch_specific_files_build_only_for_their_chip() -> None:
    """``// @arch sm_90a`` (wgmma) builds for sm_90a on sm_90 and nowhere else; other files take
    the device's architecture."""
    from metrale.cuda.runtime import file_arch

    assert file_arch("w8a8_wgmma.cu", "sm_90") == "sm_90a"
    for other in ("sm_89", "sm_100", "sm_120"):
        with pytest.raises(RuntimeError, match=r"w8a8_wgmma\.cu is built for sm_90a only"):
            file_arch("w8a8_wgmma.cu", other)
    assert file_arch("w8a8.cu", "sm_100") == "sm_100"
    want = ["nvfp4_wgmma.cu", "w8a8_wgmma.cu"]
    assert [cu for cu in kernel_files() if file_arch(cu, "sm_90") != "sm_90"] == want


def test_q2_decode_route_names_built_variants() -> None:
    """configs.Q2_0_DEC_ROUTE: every entry a built variant for rows the kernels serve, the last
    entry covering every N up to 2^31 (every m <= the row limit then has a route)."""
    for rows, _, variant in configs.Q2_0_DEC_ROUTE:
        assert variant in configs.Q2_0_DEC_VARIANTS, variant
        assert 1 <= rows <= min(configs.Q2_0_DEC_MAX_ROWS, max(configs.Q2_0_DEC_ROWS)), rows
    assert configs.Q2_0_DEC_ROUTE[-1][1] >= 1 << 31


def test_tile_kernels_read_the_grid_only_through_tile_at() -> None:
    """The tile kernels' grid is laid out in raster groups (tile.cuh ``tile_at``): a kernel that
    derives a row count or a stride from ``gridDim.x`` / ``gridDim.y`` (as the FP8 chain tile's
    factor stride once did: every output wrong under the groups) reads a group's CTAs instead."""
    for cu in ("tile.cuh", "nvfp4_tile.cu", "nvfp4_wgmma.cu"):
        text = (KERNEL_DIR / cu).read_text()
        code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("//")]
        uses = [ln for ln in code if re.search(r"gridDim\.[xy]", ln)]
        allowed = ["    const int C = (N + cols - 1) / cols, R = (m + rows - 1) / rows, G = gridDim.x / C;"]
        assert uses == (allowed if cu == "tile.cuh" else []), (cu, uses)
