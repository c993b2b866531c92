"""CPU checks of the W8A8 warpgroup-MMA launch plan (``metrale/cuda/w8a8.py``,
``kernels/w8a8_wgmma.cu``): K splits of the split-K kernels (every split non-empty, all K tiles
covered), the prefill tile choice with and without the sm_90a kernels, shared memory of every
configured kernel within the H200's 227 KB per block, the launchers' arguments against the
kernels' parameter lists, and the plan of gate and up in one launch (``w8a8_gemv_dual``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrale.cuda import configs, w8a8

#: Dynamic shared memory a block may opt in to on sm_90 (227 KB).
SM90_SMEM = 227 * 1024


@pytest.mark.parametrize("sms", [1, 78, 132])
@pytest.mark.parametrize("n", [16, 64, 4096, 4100, 12288, 14336])
@pytest.mark.parametrize("k", [16, 128, 144, 4096, 12288, 14336])
def test_split_k_covers_every_tile_once(monkeypatch: pytest.MonkeyPatch, sms: int, n: int, k: int) -> None:
    monkeypatch.setattr(w8a8, "sm_count", lambda dev=None: sms)
    tiles = -(-k // 128)
    for ra in (t.bm for t in configs.W8A8_SK_TIERS.values()):
        kps, splits = w8a8.sk_split(n, k, ra)
        assert kps >= 1 and splits >= 1
        assert (splits - 1) * kps < tiles <= splits * kps, (n, k, ra, kps, splits)
        col_tiles = -(-n // ra)
        want = max(1, min(tiles, -(-int(w8a8.SK_CTAS_PER_SM * sms) // col_tiles)))
        assert splits <= want, (n, k, splits, want)


@pytest.mark.parametrize(("ctas", "gate", "down"), [(1, (32, 1), (32, 3)), (2, (16, 2), (20, 5))])
def test_split_k_counts_for_the_qwen3_shapes(
    monkeypatch: pytest.MonkeyPatch, ctas: int, gate: tuple[int, int], down: tuple[int, int]
) -> None:
    """One and two CTAs per multiprocessor (the routed configs.W8A8_SK_CTAS_PER_SM) on 132:
    gate and up in one launch (24576 columns, 384 column tiles) unsplit either way; gate alone
    12288x4096 (192 tiles, 32 K tiles) unsplit / in 2 splits of 16; down 4096x12288 (64 tiles,
    96 K tiles) in 3 splits of 32 (192 CTAs) / 5 of 20 (320)."""
    monkeypatch.setattr(w8a8, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(w8a8, "SK_CTAS_PER_SM", ctas)
    assert w8a8.sk_split(24576, 4096, 64) == (32, 1)
    assert w8a8.sk_split(12288, 4096, 64) == gate
    assert w8a8.sk_split(4096, 12288, 64) == down


@pytest.mark.parametrize("built", [True, False])
def test_prefill_tile_choice(monkeypatch: pytest.MonkeyPatch, built: bool) -> None:
    monkeypatch.setattr(w8a8, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(w8a8, "wgmma_built", lambda: built)
    names = ("w8a8_wgmma_256x128", "w8a8_wgmma_128x128"), ("w8a8_gemm_128x128", "w8a8_gemm_64x64")
    big, small = names[0] if built else names[1]
    assert w8a8.gemm_tile(4096, 12288).name == big
    assert w8a8.gemm_tile(65, 4096).name == small
    if built:  # one wave either way (128 CTAs of 128x128, 64 of 256x128): the smaller work
        assert w8a8.gemm_tile(512, 4096).name == small
        # 96 CTAs of 256x128 (one wave) against 192 of 128x128 (two): the same work, the larger
        assert w8a8.gemm_tile(256, 12288).name == big
        # two waves of 256x128 (192 CTAs) against three of 128x128 (288): 2 x 2 > 3 x 1 units
        assert w8a8.gemm_tile(384, 12288).name == small
        assert w8a8.gemm_tile(1024, 4096).name == big  # 128 CTAs: one wave; 128x128: 256, two


def test_every_wgmma_kernel_fits_in_shared_memory() -> None:
    for t in configs.W8A8_WGMMA_TILES:
        assert t.smem <= SM90_SMEM, t
        assert (t.bm + t.bn) * 8 % t.threads == 0 and (t.threads // 8) % 8 == 0, t
    for tiers in (configs.W8A8_SK_TIERS, *configs.W8A8_SK_KS_VARIANTS.values()):
        for nb, t in tiers.items():
            assert t.bn == nb and t.name == f"w8a8_wgmma_sk_n{nb}", t
            assert t.smem == t.stages * t.ks * (t.bm + nb) * 128 + 1024 <= SM90_SMEM, t
            assert t.bm % 64 == 0 and (t.bm + nb) * 8 % (2 * t.bm) == 0 and t.stages >= 3, t


@pytest.mark.parametrize(
    ("m", "n", "want"),
    [
        (1, 12288, "w8a8_wgmma_sk_n16"),
        (16, 4096, "w8a8_wgmma_sk_n16"),
        (17, 4096, "w8a8_wgmma_sk_n32"),
        (32, 12288, "w8a8_wgmma_sk_n32"),
        (33, 12288, "w8a8_tma_n64"),  # below GEMM_MIN_ROWS: always stream-K
        (64, 12288, "w8a8_tma_n64"),
        (65, 4096, "w8a8_tma_n128"),  # down: 1 x 32 CTAs of 128x128 < 66
        (128, 4096, "w8a8_tma_n128"),
        (96, 14336, None),  # gate/up: 112 CTAs >= 66, the tile
        (128, 12288, None),  # 96 CTAs
        (256, 4096, "w8a8_tma_n128"),  # down: 2 x 32 CTAs of 128x128 < 66
        (256, 12288, None),  # gate: 96 CTAs of 256x128
        (257, 4096, None),  # past TMA_MAX_ROWS
        (2048, 4096, None),
    ],
)
def test_few_rows_routing_by_rows_and_grid(
    monkeypatch: pytest.MonkeyPatch, m: int, n: int, want: str | None
) -> None:
    """The measured rule (configs.W8A8_SK_MAX_ROWS, W8A8_TMA_ROWS, W8A8_TMA_GEMM_FILL = 0.5) on
    132 SMs: at most one of the split-K and stream-K kernels takes a row count."""
    monkeypatch.setattr(w8a8, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(w8a8, "wgmma_built", lambda: True)
    sk, bn = w8a8.split_k_tier(m), w8a8.tma_tier(m, n)
    assert sk is None or bn is None
    got = sk.name if sk else f"w8a8_tma_n{bn}" if bn else None
    assert got == want


@pytest.mark.parametrize(
    ("m", "cols", "want"),
    [
        (40, 2 * 12288, 64),
        (64, 2 * 12288, 64),
        (96, 2 * 12288, 128),  # gate + up: 192 CTAs of 128x128 would fill the GPU; paired: stream-K
        (128, 2 * 12288, 128),
        (129, 2 * 12288, None),  # past W8A8_TMA_PAIR_MAX_ROWS: the grid rule (384 CTAs: the tile)
        (192, 2 * 12288, None),
        (65, 2 * 20, 128),  # tiny: the grid rule alone already routes it
    ],
)
def test_paired_gate_up_routing(monkeypatch: pytest.MonkeyPatch, m: int, cols: int, want: int | None) -> None:
    """Gate and up in one launch (``pair``: their 2 N columns) take the stream-K kernel up to
    configs.W8A8_TMA_PAIR_MAX_ROWS rows whatever the tiles' grid, then the single rule."""
    monkeypatch.setattr(w8a8, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(w8a8, "wgmma_built", lambda: True)
    assert w8a8.tma_tier(m, cols, pair=True) == want
    if m >= w8a8.GEMM_MIN_ROWS and want is not None and cols > 1000:
        assert w8a8.tma_tier(m, cols) is None  # unpaired, the same columns go to the tile


def test_few_rows_kernels_need_the_wgmma_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(w8a8, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(w8a8, "wgmma_built", lambda: False)
    assert w8a8.split_k_tier(8) is None and w8a8.tma_tier(64, 4096) is None


def test_stream_k_tiles_fit_one_multiprocessor() -> None:
    """Every stream-K tier's stages fit the dynamic shared memory of an sm_90 CTA, and its
    activation rows are a wgmma N the file has an m64nNk32 instruction for."""
    for bn in configs.W8A8_TMA_TIERS:
        assert w8a8.tma_smem(bn) <= SM90_SMEM, bn
        assert bn in (16, 32, 64, 128), bn


@pytest.mark.parametrize("value", ["abc", "-1", "33", "1.5"])
def test_sk_max_rows_environment_refused(value: str) -> None:
    import subprocess
    import sys

    got = subprocess.run(
        [sys.executable, "-c", "import metrale.cuda.w8a8"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "METRALE_W8A8_SK_MAX_ROWS": value},
        timeout=60,
    )
    assert got.returncode != 0
    assert f"METRALE_W8A8_SK_MAX_ROWS='{value}': want an int in 0 .. 32" in got.stderr


class Arr:
    """A stand-in for a device array: shape and row stride only."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape, self.strides = shape, (shape[-1],)


def kernel_params(macro_kernel: str, cu_file: str = "w8a8_wgmma.cu") -> list[Any]:
    """The parameter list of ``macro_kernel`` (as spelled in its macro, e.g. ``w8a8_tma_n##BN``)
    in kernels/``cu_file``, read from the source: a tensor map for ``TmaDesc``, "array" for a
    pointer, int64 for ``long long``, int32 for ``int``."""
    import re

    from metrale.cuda import tma
    from metrale.cuda.runtime import KERNEL_DIR

    text = (KERNEL_DIR / cu_file).read_text()
    sig = re.search(re.escape(macro_kernel) + r"\(([^{};]*?)\)\s*\{", text)  # the definition, not a comment
    assert sig is not None, macro_kernel
    want: list[Any] = []
    for words in (p.replace("\\", " ").split() for p in sig.group(1).split(",")):
        if "TmaDesc" in words:
            want.append(tma.TensorMap)
        elif any("*" in w for w in words):
            want.append("array")
        elif words[-2:-1] == ["long"]:
            want.append(np.int64)
        else:
            assert "int" in words, words
            want.append(np.int32)
    return want


def fake_device(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """No GPU: every kernel "built" (its name stands for it), 132 SMs, device 0; the list that
    receives each ``pdl.launch`` as (kernel, grid, block, args, smem)."""
    seen: list[Any] = []
    monkeypatch.setattr(w8a8, "get_kernel", lambda f, name: name)
    monkeypatch.setattr(w8a8, "set_dynamic_smem", lambda kern, nbytes: None)
    monkeypatch.setattr(w8a8, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(w8a8, "device_id", lambda: 0)
    monkeypatch.setattr(w8a8.pdl, "launch", lambda k, g, b, args, smem=0: seen.append((k, g, b, args, smem)))
    return seen


def test_split_k_launch_passes_the_kernels_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """As below, for the split-K kernels ``w8a8_wgmma_sk_n{nb}`` (m = 8 rows, Qwen3-8B gate)."""
    want = kernel_params("w8a8_wgmma_sk_n##NB")

    class W:
        n, k = 12288, 4096

    seen = fake_device(monkeypatch)
    monkeypatch.setitem(w8a8._sk_work, (0, 12288), (Arr((1,)), Arr((1,))))
    w8a8._gemv_launch(
        Arr((8, 4096)),
        Arr((8,)),
        W(),
        {"weight": Arr((12288, 4096)), "weight_scale": Arr((12288,))},
        Arr((8, 12288)),
        12288,
        None,
        gemm="w8a8_wgmma_sk_n16",
    )
    ((name, _grid, _block, args, _smem),) = seen
    assert name == "w8a8_wgmma_sk_n16"
    got = ["array" if isinstance(a, Arr) else type(a) for a in args]
    assert got == want


def _tma_launch_once(monkeypatch: pytest.MonkeyPatch, m: int, n: int, k: int, bn: int) -> Any:
    """The one launch ``_tma_launch`` issues for m rows times an [n, k] weight on the
    ``w8a8_tma_n{bn}`` kernel (132 SMs, stand-in arrays and tensor maps): (kernel, grid, block,
    args, smem)."""
    from metrale.cuda import tma

    class W:
        pass

    W.n, W.k = n, k
    seen = fake_device(monkeypatch)
    monkeypatch.setattr(tma, "row_tiles", lambda *a: tma.TensorMap())
    monkeypatch.setitem(w8a8._tma_work, (0, bn), (Arr((1,)), Arr((1,))))
    arr = {"weight": Arr((n, k)), "weight_scale": Arr((n,))}
    w8a8._tma_launch(Arr((m, k)), Arr((m,)), W(), arr, Arr((m, n)), n, bn)
    (launch,) = seen
    return launch


def test_stream_k_launch_passes_the_kernels_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's arguments match the kernel's parameter list in kernels/w8a8_wgmma.cu one for
    one (a tensor map for ``TmaDesc``, a device array for a pointer, int32 for ``int``, int64 for
    ``long long``): a launch whose arguments drift from the signature reads garbage on the GPU."""
    want = kernel_params("w8a8_tma_n##BN")
    name, grid, block, args, smem = _tma_launch_once(monkeypatch, 100, 4096, 12288, 128)
    assert name == "w8a8_tma_n128" and grid == (132,) and block == (384,) and smem == w8a8.tma_smem(128)
    got = ["array" if isinstance(a, Arr) else type(a) for a in args]
    assert got == want


@pytest.mark.parametrize("ks", [1, 2])
def test_stream_k_units_count_k_steps(monkeypatch: pytest.MonkeyPatch, ks: int) -> None:
    """The stream-K launch counts one unit per (tile, K step of configs.W8A8_TMA_KS K tiles) and
    sizes the slots by it: N = 4096 (32 weight tiles), m = 40 (one row tile), K = 640 (5 K
    tiles: 5 steps of one, or 3 of two, the last holding one) -> 160 / 96 units, a CTA per
    multiprocessor up to them."""
    monkeypatch.setattr(configs, "W8A8_TMA_KS", ks)
    name, grid, _block, _args, smem = _tma_launch_once(monkeypatch, 40, 4096, 640, 64)
    assert name == "w8a8_tma_n64" and grid == (min(132, 32 * (5 if ks == 1 else 3)),)
    assert smem == configs.W8A8_TMA_TIERS[64] * ks * (128 + 64) * 128 + 1024


def _plan_dual(monkeypatch: pytest.MonkeyPatch, m: int, n: int, k: int) -> tuple[list[Any], dict[str, Any]]:
    """The launches ``_gemv_launch`` issues for gate and up of [n, k] at m rows (132 SMs, the
    sm_90a kernels built), and the stand-ins it was given."""
    from metrale.cuda import tma

    class W:
        def __init__(self, name: str) -> None:
            self.n, self.k, self.name = n, k, name

    maps: list[Any] = []

    def row_tiles(a: Any, *rest: Any) -> Any:
        maps.append((a, tma.TensorMap()))
        return maps[-1][1]

    launches = fake_device(monkeypatch)
    monkeypatch.setattr(w8a8, "wgmma_built", lambda: True)
    monkeypatch.setattr(tma, "row_tiles", row_tiles)
    monkeypatch.setitem(w8a8._sk_work, (0, n), (Arr((1,)), Arr((1,))))
    for bn in configs.W8A8_TMA_TIERS:
        monkeypatch.setitem(w8a8._tma_work, (0, bn), (Arr((1,)), Arr((1,))))
    st = {
        "q": Arr((m, k)),
        "s": Arr((m,)),
        "wg": W("gate"),
        "ag": {"weight": Arr((n, k)), "weight_scale": Arr((n,))},
        "og": Arr((m, n)),
        "wu": W("up"),
        "au": {"weight": Arr((n, k)), "weight_scale": Arr((n,))},
        "ou": Arr((m, n)),
        "maps": maps,
    }
    second = w8a8._Second(st["wu"], st["au"], st["ou"], n + 8)
    w8a8._gemv_launch(st["q"], st["s"], st["wg"], st["ag"], st["og"], n, None, None, second)
    return [(kern, grid, args) for kern, grid, _block, args, _smem in launches], st


def test_dual_split_k_is_one_launch_over_both_matrices(monkeypatch: pytest.MonkeyPatch) -> None:
    """m = 8, Qwen3-8B gate/up: one split-K launch whose grid holds both matrices' column tiles;
    the tail names up's weight, scales, output and row stride, and t1 = gate's tile count."""
    seen, st = _plan_dual(monkeypatch, 8, 12288, 4096)
    ((name, grid, args),) = seen
    t1 = -(-12288 // 64)
    kps, splits = w8a8.sk_split(2 * 12288, 4096, 64)
    assert name == "w8a8_wgmma_sk_n16" and grid == (2 * t1, splits)
    assert args[0] is st["ag"]["weight"] and args[8] is st["og"]
    w2, sw2, out2, ldo2, got_t1 = args[-5:]
    assert w2 is st["au"]["weight"] and sw2 is st["au"]["weight_scale"] and out2 is st["ou"]
    assert int(ldo2) == 12288 + 8 and int(got_t1) == t1 and int(args[-6]) == kps


@pytest.mark.parametrize("m", [40, 64, 128])
def test_dual_stream_k_is_one_launch_over_both_matrices(monkeypatch: pytest.MonkeyPatch, m: int) -> None:
    """33..128 rows: one stream-K launch, nmat = 2, up's tensor map encoded from up's weight."""
    seen, st = _plan_dual(monkeypatch, m, 12288, 4096)
    ((name, grid, args),) = seen
    assert name == f"w8a8_tma_n{64 if m <= 64 else 128}" and grid == (132,)
    maps = st["maps"]
    assert len(maps) == 3  # gate's weight, up's weight and the codes, each encoded once
    tw, tq, tw2 = (
        next(t for a, t in maps if a is x) for x in (st["ag"]["weight"], st["q"], st["au"]["weight"])
    )
    assert args[0] is tw and args[1] is tq and args[11] is tw2
    assert args[12] is st["au"]["weight_scale"] and args[13] is st["ou"] and int(args[14]) == 12288 + 8
    assert int(args[15]) == 2


@pytest.mark.parametrize("m", [129, 300])
def test_dual_past_the_pair_rule_is_two_launches(monkeypatch: pytest.MonkeyPatch, m: int) -> None:
    """Past W8A8_TMA_PAIR_MAX_ROWS, w8a8.TILE_PAIR off, the pair is one launch per matrix, each
    routed as alone."""
    monkeypatch.setattr(w8a8, "TILE_PAIR", False)
    seen, st = _plan_dual(monkeypatch, m, 12288, 4096)
    assert len(seen) == 2
    (n1, _, a1), (n2, _, a2) = seen
    assert n1 == n2 == w8a8.gemm_tile(m, 12288).name
    assert a1[0] is st["ag"]["weight"] and a1[8] is st["og"]
    assert a2[0] is st["au"]["weight"] and a2[8] is st["ou"] and int(a2[9]) == 12288 + 8


@pytest.mark.parametrize(
    ("m", "n", "want"),
    [
        (129, 12288, "w8a8_wgmma_256x192"),  # 128 CTAs (one wave) against 192 of 256x128 (two)
        (256, 12288, "w8a8_wgmma_256x192"),
        (1024, 12288, "w8a8_wgmma_256x192"),  # 512 CTAs in 4 waves against 768 in 6: a tie, the larger
        (512, 4096, "w8a8_wgmma_256x128"),  # 128 CTAs of 256x128 (one wave) against 88 of 256x192
    ],
)
def test_pair_tile_choice(monkeypatch: pytest.MonkeyPatch, m: int, n: int, want: str) -> None:
    """Gate and up in one launch of the tile pick from configs.W8A8_WGMMA_ROUTED["pair"] by the
    same rule over both matrices' column tiles; one matrix never takes a pair-only tile."""
    monkeypatch.setattr(w8a8, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(w8a8, "wgmma_built", lambda: True)
    assert w8a8.gemm_tile(m, n, 2).name == want
    assert w8a8.gemm_tile(m, n).name in configs.W8A8_WGMMA_ROUTED["one"]


@pytest.mark.parametrize("m", [129, 300])
def test_dual_tile_pair_is_one_launch_over_both_matrices(monkeypatch: pytest.MonkeyPatch, m: int) -> None:
    """w8a8.TILE_PAIR past the stream-K pair: one launch of the pair's tile, grid (row tiles, 2 t1),
    the tail naming up's weight, scales, output and row stride and t1 = gate's column tiles, the
    arguments the kernel's parameter list one for one."""
    monkeypatch.setattr(w8a8, "TILE_PAIR", True)
    seen, st = _plan_dual(monkeypatch, m, 12288, 4096)
    ((name, grid, args),) = seen
    tile = w8a8.gemm_tile(m, 12288, 2)
    t1 = -(-12288 // tile.bn)
    assert name == tile.name and grid == (-(-m // tile.bm), 2 * t1)
    assert args[0] is st["ag"]["weight"] and args[8] is st["og"]
    w2, sw2, out2, ldo2, got_t1 = args[-5:]
    assert w2 is st["au"]["weight"] and sw2 is st["au"]["weight_scale"] and out2 is st["ou"]
    assert int(ldo2) == 12288 + 8 and int(got_t1) == t1
    got = ["array" if isinstance(a, Arr) else type(a) for a in args]
    assert got == kernel_params("w8a8_wgmma_##BM##x##BN")


@pytest.mark.parametrize(
    ("m", "n", "launches"),
    [
        (129, 12288, 1),  # pair 256x192: 1 wave x 49152 against 2 x (1 x 32768) of 256x128
        (256, 12288, 1),
        (1024, 12288, 1),  # 4 waves x 49152 against 2 x 3 x 32768: a tie, one launch
        (256, 14336, 1),  # pair 256x128: 2 waves x 32768 against 2 x (1 x 32768)
        (384, 14336, 1),  # pair 128x192: 4 waves x 24576 against 2 x (3 x 16384) of 128x128: a tie
        (1281, 12288, 2),  # pair 128x192: 11 waves x 24576 against 2 x (8 x 16384) of 128x128
    ],
)
def test_tile_pair_only_where_its_waves_pay(
    monkeypatch: pytest.MonkeyPatch, m: int, n: int, launches: int
) -> None:
    """w8a8.TILE_PAIR launches gate and up as one grid only where the pair's tile takes no more
    whole-wave work per multiprocessor than the single matrix's tile twice (pair_pays); else one
    launch per matrix, each routed as alone."""
    monkeypatch.setattr(w8a8, "TILE_PAIR", True)
    seen, _ = _plan_dual(monkeypatch, m, n, 4096)
    assert len(seen) == launches
    if launches == 2:
        assert seen[0][0] == seen[1][0] == w8a8.gemm_tile(m, n).name


def test_single_tile_launch_passes_the_kernels_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """One matrix on a wgmma tile: the second matrix's arguments repeat the first's and t1 is the
    grid's column tiles (no tile takes the second branch)."""
    monkeypatch.setattr(w8a8, "TILE_PAIR", False)
    seen, _ = _plan_dual(monkeypatch, 300, 12288, 4096)
    assert len(seen) == 2
    for name, grid, args in seen:
        assert name in w8a8.WGMMA_TILES and int(args[-1]) == grid[1]
        assert args[-5] is args[0] and args[-3] is args[8]
        got = ["array" if isinstance(a, Arr) else type(a) for a in args]
        assert got == kernel_params("w8a8_wgmma_##BM##x##BN")


def test_dual_refuses_bad_operands() -> None:
    """One line naming the weights or the codes, before anything touches the device."""
    from metrale.cuda.weights import DeviceWeight
    from metrale.errors import MetraleError
    from metrale.reference.formats import W8a8Weight

    def dev(n: int, k: int, name: str) -> DeviceWeight:
        host = W8a8Weight(weight=np.zeros((n, k), np.int8), weight_scale=np.ones(n, np.float32), name=name)
        return DeviceWeight(host=host)

    codes = w8a8.DeviceA8Codes(q=np.zeros((2, 64), np.int8), scale=np.ones(2, np.float32))
    with pytest.raises(MetraleError, match=r"gate is \[32, 64\] and up \[48, 64\], want one shape"):
        w8a8.w8a8_gemv_dual(codes, dev(32, 64, "gate"), None, dev(48, 64, "up"), None)
    with pytest.raises(MetraleError, match="codes have K=64, gate wants K=128"):
        w8a8.w8a8_gemv_dual(codes, dev(32, 128, "gate"), None, dev(32, 128, "up"), None)
    with pytest.raises(MetraleError, match="codes are ndarray, want w8a8_quantize's result"):
        w8a8.w8a8_gemv_dual(codes.q, dev(32, 64, "gate"), None, dev(32, 64, "up"), None)


# ---- gate and up with the SiLU step in the tile's epilogue (w8a8_gemv_dual_silu_quant) ----


@pytest.mark.parametrize("st", [False, True], ids=["table", "compact"])
@pytest.mark.parametrize("tile", configs.W8A8_SILU_TILES)
@pytest.mark.parametrize(("m", "n"), [(300, 12288), (129, 208), (1, 48)])
def test_silu_tile_launch_passes_the_kernels_parameters(
    monkeypatch: pytest.MonkeyPatch, tile: str, m: int, n: int, st: bool
) -> None:
    """The SiLU tile's launch: grid (row tiles, P = ceil(N / (BN / 2))), its block and shared
    memory, arguments one for one with the kernel's parameter list (gate's weight and scales, then
    up's, N, K, the codes, h's and up's outputs, the SiLU table, the parts; with SILU_TILE_ST the
    ``_st`` kernel, the compact table and its length), the parts scratch holding m P of them;
    then ``w8a8_quantize_parts`` over h's rows with the same P and parts."""
    t = w8a8.WGMMA_TILES[tile]
    seen = fake_device(monkeypatch)
    monkeypatch.setattr(w8a8, "SILU_TILE_ST", st)
    counts: list[int] = []
    parts = Arr((1,))
    monkeypatch.setattr(w8a8, "_tile_parts_scratch", lambda count: counts.append(count) or parts)
    table = Arr((7684,) if st else (65536,))
    table.size = table.shape[0]
    asked: list[bool] = []
    monkeypatch.setattr(w8a8, "device_table", lambda name, compact=False: asked.append(compact) or table)
    k = 4096
    codes = w8a8.DeviceA8Codes(q=Arr((m, k)), scale=Arr((m,)))
    h = w8a8.DeviceA8Codes(q=Arr((m, n)), scale=Arr((m,)))
    ag = {"weight": Arr((n, k)), "weight_scale": Arr((n,))}
    au = {"weight": Arr((n, k)), "weight_scale": Arr((n,))}
    og, ou = Arr((m, n)), Arr((m, n))
    w8a8._silu_tile_launch(t, codes, ag, au, og, n + 8, ou, n + 16, h)
    (k1, g1, b1, a1, smem1), (k2, g2, b2, a2, _) = seen
    p = -(-n // (t.bn // 2))
    name = t.silu_st_name if st else t.silu_name
    assert k1 == name and g1 == (-(-m // t.bm), p) and b1 == (t.threads,) and smem1 == t.smem
    assert counts == [m * p] and asked == [st]
    got = ["array" if isinstance(a, Arr) else type(a) for a in a1]
    assert got == kernel_params("w8a8_wgmma_silu_st_##BM##x##BN" if st else "w8a8_wgmma_silu_##BM##x##BN")
    assert not st or int(a1[16]) == 7684
    assert a1[0] is ag["weight"] and a1[1] is ag["weight_scale"]
    assert a1[2] is au["weight"] and a1[3] is au["weight_scale"]
    assert (int(a1[4]), int(a1[5]), int(a1[9])) == (n, k, m)
    assert a1[6] is codes.q and a1[8] is codes.scale and a1[10] is og and a1[12] is ou
    assert (int(a1[11]), int(a1[13])) == (n + 8, n + 16)
    assert a1[14] is table and a1[15] is parts
    assert k2 == "w8a8_quantize_parts" and g2 == (-(-n // w8a8.SILU_SLICE), m)
    assert b2 == (w8a8.SILU_SLICE // 8,)
    got = ["array" if isinstance(a, Arr) else type(a) for a in a2]
    assert got == kernel_params("w8a8_quantize_parts", "w8a8.cu")
    assert a2[0] is og and int(a2[2]) == n and a2[3] is parts and int(a2[4]) == p
    assert a2[5] is h.q and a2[6] is h.scale


@pytest.mark.parametrize(("m", "ctas"), [(33, 33), (528, 528), (4096, 528)])
def test_silu_quant_st_launch_passes_the_kernels_parameters(
    monkeypatch: pytest.MonkeyPatch, m: int, ctas: int
) -> None:
    """``w8a8_silu_quant_st`` where SILU_ST_MIN_ROWS routes it: grid min(m, MINB SMs) (132 SMs),
    its block, the compact table's bytes of dynamic shared memory, arguments one for one with
    the kernel's parameter list (gate and up with their strides, the compact table and its
    length, K, m, the codes and scales); a K past its registers takes the routing before it."""
    seen = fake_device(monkeypatch)
    monkeypatch.setattr(w8a8, "SILU_ST_MIN_ROWS", 33)
    table = Arr((7684,))
    table.size = 7684
    monkeypatch.setattr(w8a8, "device_table", lambda name, compact=False: table)
    k = 12288
    threads, groups, minb = configs.W8A8_SILU_QUANT_ST
    assert minb * 132 == 528 and 8 * groups * threads >= k
    g, u = Arr((m, k)), Arr((m, k))
    g.strides, u.strides = (2 * k + 16,), (2 * k,)  # bytes: bf16 rows, gate's with a gap
    codes = w8a8.DeviceA8Codes(q=Arr((m, k)), scale=Arr((m,)))
    w8a8._silu_quant(g, u, codes, Arr((1,)))
    ((name, grid, block, args, smem),) = seen
    assert (name, grid, block, smem) == ("w8a8_silu_quant_st", (ctas,), (threads,), 4 * 7684)
    got = ["array" if isinstance(a, Arr) else type(a) for a in args]
    assert got == kernel_params("w8a8_silu_quant_st", "w8a8.cu")
    assert args[0] is g and args[2] is u and args[4] is table
    assert args[8] is codes.q and args[9] is codes.scale
    assert (int(args[1]), int(args[3]), int(args[5]), int(args[6]), int(args[7])) == (k + 8, k, 7684, k, m)
    assert w8a8.silu_quant_st_grid(32, k) is None
    assert w8a8.silu_quant_st_grid(m, 8 * groups * threads + 8) is None


@pytest.mark.parametrize(
    ("m", "want"),
    [
        (1, None),  # split K
        (64, None),  # the stream-K pair
        (65, "w8a8_wgmma_128x192"),  # ahead of the stream-K pair (plain gate + up keeps that)
        (128, "w8a8_wgmma_128x192"),
        (129, "w8a8_wgmma_256x192"),  # the pair tile: one wave of 128 CTAs
        (256, "w8a8_wgmma_256x192"),
        (1024, "w8a8_wgmma_256x192"),
    ],
)
def test_silu_tile_routes_with_the_pair_tile(
    monkeypatch: pytest.MonkeyPatch, m: int, want: str | None
) -> None:
    """Qwen3-8B gate / up: the SiLU step goes into the tile exactly where the pair's tile takes
    gate and up (``pair_tile(silu=True)``: ahead of the stream-K pair, which the plain dual launch
    keeps up to configs.W8A8_TMA_PAIR_MAX_ROWS), and only with FUSED_SILU; Llama-3-8B at 96 rows,
    where the pair's tile does not pay, keeps the stream-K pair; a forced tile must be one of
    configs.W8A8_SILU_TILES."""
    from metrale.errors import MetraleError

    fake_device(monkeypatch)
    monkeypatch.setattr(w8a8, "wgmma_built", lambda: True)
    monkeypatch.setattr(w8a8, "TILE_PAIR", True)
    monkeypatch.setattr(w8a8, "FUSED_SILU", True)
    got = w8a8.silu_tile(m, 12288)
    assert (got.name if got else None) == want
    pair = w8a8.pair_tile(m, 12288, silu=True)
    assert (pair.name if pair else None) == want
    plain = w8a8.pair_tile(m, 12288)
    assert (plain.name if plain else None) == (want if m > configs.W8A8_TMA_PAIR_MAX_ROWS else None)
    assert w8a8.silu_tile(96, 14336) is None and w8a8.tma_tier(96, 2 * 14336, pair=True) == 128
    monkeypatch.setattr(w8a8, "FUSED_SILU", False)
    assert w8a8.silu_tile(m, 12288) is None
    assert w8a8.silu_tile(m, 12288, "w8a8_wgmma_128x192").name == "w8a8_wgmma_128x192"
    with pytest.raises(MetraleError, match="gemm='w8a8_wgmma_128x128', want one of"):
        w8a8.silu_tile(m, 12288, "w8a8_wgmma_128x128")


# ---- the stream-K pair with the SiLU step in its epilogue (w8a8_tma_silu_n{bn}) ----


def test_stream_k_silu_fits_one_multiprocessor() -> None:
    """Every stream-K SiLU tier's stages, u's exchange, the amax reduction and the compact SiLU
    table (7,684 floats) fit the dynamic shared memory of an sm_90 CTA; one stage more would not
    (the stages are the most that fit)."""
    for bn, stages in configs.W8A8_TMA_SILU_TIERS.items():
        assert bn in configs.W8A8_TMA_TIERS, bn
        smem = w8a8.tma_silu_smem(bn, 7684)
        assert smem == stages * (128 + bn) * 128 + 1024 + 160 * bn + 4 * 7684 <= SM90_SMEM, bn
        assert smem + (128 + bn) * 128 > SM90_SMEM, bn


@pytest.mark.parametrize(("m", "n", "bn"), [(40, 12288, 64), (64, 14336, 64), (100, 208, 128), (300, 48, 64)])
def test_stream_k_silu_launch_passes_the_kernels_parameters(
    monkeypatch: pytest.MonkeyPatch, m: int, n: int, bn: int
) -> None:
    """The stream-K SiLU launch: a CTA per multiprocessor up to its units (ceil(N / 64) tiles of
    gate and up x row tiles x 128-byte K tiles), 384 threads, ``tma_silu_smem`` bytes, arguments
    one for one with the kernel's parameter list (gate's and up's maps of 64-row boxes encoded
    from their weights, the codes' map of bn-row boxes, the scales, N, K, m, h's and up's outputs
    and strides, the stream-K workspace, the compact table and its length, the parts); then
    ``w8a8_quantize_parts`` over h with P = ceil(N / 64)."""
    from metrale.cuda import tma

    seen = fake_device(monkeypatch)
    maps: list[Any] = []
    monkeypatch.setattr(tma, "row_tiles", lambda a, rows, rb, stride, box: maps.append((a, box)) or (a, box))
    work = (Arr((1,)), Arr((1,)))
    monkeypatch.setitem(w8a8._tma_work, (0, bn), work)
    counts: list[int] = []
    parts = Arr((1,))
    monkeypatch.setattr(w8a8, "_tile_parts_scratch", lambda count: counts.append(count) or parts)
    table = Arr((7684,))
    table.size = 7684
    monkeypatch.setattr(w8a8, "device_table", lambda name, compact=False: table if compact else None)

    class W:
        pass

    k = 4096
    W.n, W.k = n, k
    codes = w8a8.DeviceA8Codes(q=Arr((m, k)), scale=Arr((m,)))
    h = w8a8.DeviceA8Codes(q=Arr((m, n)), scale=Arr((m,)))
    ag = {"weight": Arr((n, k)), "weight_scale": Arr((n,))}
    au = {"weight": Arr((n, k)), "weight_scale": Arr((n,))}
    og, ou = Arr((m, n)), Arr((m, n))
    w8a8._tma_silu_launch(bn, codes, W(), ag, au, og, n + 8, ou, n + 16, h)
    (k1, g1, b1, a1, smem1), (k2, g2, _b2, a2, _) = seen
    p = -(-n // 64)
    units = p * -(-m // bn) * (k // 128)
    assert k1 == f"w8a8_tma_silu_n{bn}" and g1 == (min(132, units),) and b1 == (384,)
    assert smem1 == w8a8.tma_silu_smem(bn, 7684) and counts == [m * p]
    got = [tma.TensorMap if isinstance(a, tuple) else "array" if isinstance(a, Arr) else type(a) for a in a1]
    assert got == kernel_params("w8a8_tma_silu_n##BN")
    assert a1[0] == (ag["weight"], 64) and a1[1] == (au["weight"], 64) and a1[2] == (codes.q, bn)
    assert a1[3] is ag["weight_scale"] and a1[4] is au["weight_scale"] and a1[7] is codes.scale
    assert (int(a1[5]), int(a1[6]), int(a1[8])) == (n, k, m)
    assert a1[9] is og and int(a1[10]) == n + 8 and a1[11] is ou and int(a1[12]) == n + 16
    assert (a1[13], a1[14]) == work and a1[15] is table and int(a1[16]) == 7684 and a1[17] is parts
    assert k2 == "w8a8_quantize_parts" and g2 == (-(-n // w8a8.SILU_SLICE), m)
    assert a2[0] is og and a2[3] is parts and int(a2[4]) == p and a2[5] is h.q and a2[6] is h.scale


@pytest.mark.parametrize(
    ("m", "n", "want"),
    [
        (32, 12288, None),  # split K
        (33, 12288, 64),
        (64, 12288, 64),
        (65, 12288, None),  # the SiLU tile goes first (Qwen3-8B from 65 rows)
        (96, 14336, 128),  # Llama-3-8B: the pair's tile does not pay, the stream-K pair serves
        (128, 14336, 128),
        (129, 14336, None),  # past W8A8_TMA_PAIR_MAX_ROWS
    ],
)
def test_stream_k_silu_routes_with_the_stream_k_pair(
    monkeypatch: pytest.MonkeyPatch, m: int, n: int, want: int | None
) -> None:
    """With TMA_SILU the SiLU step goes into the stream-K pair exactly where that pair takes gate
    and up and no SiLU tile does; never without TMA_SILU or FUSED_SILU."""
    fake_device(monkeypatch)
    monkeypatch.setattr(w8a8, "wgmma_built", lambda: True)
    monkeypatch.setattr(w8a8, "TILE_PAIR", True)
    monkeypatch.setattr(w8a8, "FUSED_SILU", True)
    monkeypatch.setattr(w8a8, "TMA_SILU", True)
    got = None if w8a8.silu_tile(m, n) is not None else w8a8.tma_silu_tier(m, n)
    assert got == want
    if want is not None:
        assert w8a8.tma_tier(m, 2 * n, True) == want
    monkeypatch.setattr(w8a8, "TMA_SILU", False)
    assert w8a8.tma_silu_tier(m, n) is None
    monkeypatch.setattr(w8a8, "TMA_SILU", True)
    monkeypatch.setattr(w8a8, "FUSED_SILU", False)
    assert w8a8.tma_silu_tier(m, n) is None
