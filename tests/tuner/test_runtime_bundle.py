"""The runtime's bundle side: bucket dispatch and miss counting, background reporting (a dead
server never slows a call), the checks of a bundle against this process (Triton version, GPU,
arch, sources), the warmup wiring at construction, and the export folder's round trip. No kernel
runs here except in the serving loop at the end; launches are recorded instead."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
import triton

import catalog.families.decode as decode_spec
from tuner.runtime.client import KvtuneClient
from catalog.core import Bucket, Config
from catalog.families import get_spec
from catalog.keys import make_key
from tuner.runtime import ExportError, TunedKernels, alloc_paged_cache, read_export, write_export
from tuner.runtime import kernels as rk
from tuner.runtime.bundle import KernelTable, Process, defaults_bundle
from tuner.runtime.dispatch import MissCounter, MissReporter
from tuner.runtime.export import needed_sources
from tuner.targets import detect
from tuner.kernels import get_family
from tuner.warmup import (ArgSpec, WarmReport, WarmupKey, backend_class, keys_for, launch_specs, no_compiles,
                           record_launches)

H, TOPK, WINDOW = 16, 40, 20
# The bundles here carry stand-in warmup keys (`_fake_key`), so construction does not warm them:
# `warmup=False` except where warming is the subject (mocked) or the serving loop at the end.
COLD: dict[str, Any] = {"warmup": False}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def proc() -> Process:
    return rk.this_process()


def _fake_key(kernel: str, source_hash: str, target: str, version: str, n: int) -> dict[str, Any]:
    return WarmupKey(kernel=kernel, source_hash=source_hash, fn=f"{kernel}_kernel",
                     args=(ArgSpec("n", "i32", "D" if n % 16 == 0 else ""),), options=(("num_warps", 4),),
                     target=target, triton=version).to_json()


def _tune(bundle: dict[str, Any], kernel: str, bucket: str, cfg: Config, proc: Process,
          device: str | None = None, version: str | None = None) -> dict[str, Any]:
    """Turn one default entry of `bundle` into a tuned one, as the server serves it."""
    k = bundle["kernels"][kernel]
    spec = get_spec(kernel)
    from catalog.core import ProblemKey

    h = spec.render(ProblemKey.from_json(k["key"]), cfg).source_hash
    e = next(e for e in k["buckets"] if e["name"] == bucket)
    ver = version or proc.triton
    e.update(default=False, config=cfg.as_dict(), source_hash=h, time_us=10.0, default_time_us=15.0, speedup=1.5,
             provenance={"job_id": 1, "device_name": device or proc.device_name, "triton_version": ver,
                         "torch_version": torch.__version__, "timing": "cuda-graph"},
             warmup={"target": proc.arch, "triton_version": ver,
                     "keys": [_fake_key(kernel, h, proc.arch, ver, n) for n in (16, 17)]})
    k["tuned"] = True
    return bundle


DECODE_T2 = Config.from_dict({**decode_spec.default_config("nvfp4_288", "fp8_528").as_dict(),
                              "BLOCK_N": 16, "MMA": "keys_m", "num_warps": 4})


def _tuned_bundle(proc: Process, **kw: Any) -> dict[str, Any]:
    b = defaults_bundle(proc.arch, H, TOPK, WINDOW)
    _tune(b, "decode", "T2-2", DECODE_T2, proc, **kw)
    pack_cfg = get_spec("pack").default_config(make_key("pack", proc.arch))
    return _tune(b, "pack", "N1-64", pack_cfg.replace(BLOCK_T=1), proc, **kw)


def _decode_call(tk: TunedKernels, b: int, device: str = "cpu", sink: bool = False, page: int = 16,
                 lengths: bool = False) -> None:
    kw = alloc_paged_cache("fp8_528", 2, page, device, fill=0)
    kc = alloc_paged_cache("nvfp4_288", 4, page, device, fill=0)
    q = torch.zeros(b, 1, H, 512, dtype=torch.bfloat16, device=device)
    idx = lambda n: torch.zeros(b, 1, n, dtype=torch.int32, device=device)  # noqa: E731
    attn_sink = torch.zeros(H, dtype=torch.float32, device=device) if sink else None
    lens = (lambda n: torch.full((b,), n // 2, dtype=torch.int32, device=device)) if lengths else (lambda n: None)  # noqa: E731
    tk.flash_mla_with_kvcache(q, kw, None, None, 512, None, indices=idx(WINDOW), extra_k_cache=kc,
                              extra_indices_in_kvcache=idx(TOPK), attn_sink=attn_sink, topk_length=lens(WINDOW),
                              extra_topk_length=lens(TOPK))


def test_calls_launch_their_buckets_config_and_count_misses(proc: Process) -> None:
    tk = TunedKernels(_tuned_bundle(proc), process=proc, **COLD)
    assert not tk.mismatches
    with record_launches() as launches:
        for b in (1, 2, 100):
            _decode_call(tk, b)
    block_n = [la.kwargs["BLOCK_N"] for la in launches if la.fn.fn.__name__ == "decode_kernel"]
    assert block_n == [32, 16, 32]  # T=1 default, T=2 tuned, T=100 outside every bucket: the default
    key = tk.tables[("decode", ("nvfp4_288", "fp8_528"))].key
    assert tk.misses.totals == {(key, "T", 100): 1}
    assert tk.calls[("decode", "T2-2")] == 1 and tk.calls[("decode", "miss")] == 1
    pack_fm = ("nvfp4_288",)
    assert tk.config_for("pack", pack_fm, "N", 64)["BLOCK_T"] == 1
    assert tk.config_for("pack", pack_fm, "N", 65)["BLOCK_T"] != 1
    # A call of another model shape (8 local heads) has no table: the default, counted under its own key.
    assert tk.config_for("decode", ("nvfp4_288", "fp8_528"), "T", 2, heads=8, topk=TOPK, window=WINDOW) == \
        decode_spec.default_config("nvfp4_288", "fp8_528")
    assert any(k.kernel == "decode" and k.heads == 8 for k, _, _ in tk.misses.totals)


def test_lookup_is_explicit_coverage_with_contexts() -> None:
    cfgs = [Config.of(TILES=i) for i in range(4)]
    from tuner.runtime.bundle import Entry

    es = (Entry(Bucket("B", 1, 8, 4096), cfgs[0], "a", False), Entry(Bucket("B", 1, 8, 65536), cfgs[1], "a", False),
          Entry(Bucket("B", 9, 64, 65536), cfgs[2], "a", False), Entry(Bucket("T", 1, 4096, 16384), cfgs[3], "a", False))
    t = KernelTable("logits", make_key("logits", "interp"), es, Config.of(TILES=9))
    assert t.lookup("B", 4, ctx=1000).config == cfgs[0]  # the smallest context that covers the call's
    assert t.lookup("B", 4, ctx=8192).config == cfgs[1]
    assert t.lookup("B", 4, ctx=10**6).config == cfgs[1]  # past every context: the largest
    assert t.lookup("B", 9).config == cfgs[2] and t.lookup("T", 4096).config == cfgs[3]
    assert t.lookup("B", 65) is None and t.lookup("B", 0) is None and t.lookup("N", 1) is None


def test_misses_go_out_in_batches_and_a_dead_server_costs_calls_nothing() -> None:
    counter = MissCounter()
    got: list[dict[str, Any]] = []
    done = threading.Event()

    def send(payload: dict[str, Any]) -> None:
        got.append(payload)
        done.set()

    rep = MissReporter(counter, send, device="gpu", triton="3.6.0", interval_s=60.0, batch=3)
    key = make_key("decode", "interp", H, TOPK, WINDOW)
    for n in (100, 100, 7):
        counter.count(key, "T", n)
    assert done.wait(5.0), "a full batch wakes the reporter before its interval"
    rep.close()
    assert got[0]["misses"] == [{**key.to_json(), "dim": "T", "n": 7, "count": 1},
                                {**key.to_json(), "dim": "T", "n": 100, "count": 2}]
    assert got[0]["device"] == "gpu" and got[0]["triton"] == "3.6.0"

    stuck = threading.Event()

    def dead(payload: dict[str, Any]) -> None:
        stuck.wait(2.0)  # a server that hangs, then refuses
        raise httpx.ConnectError("connection refused")

    counter = MissCounter()
    rep = MissReporter(counter, dead, device="gpu", triton="3.6.0", interval_s=60.0, batch=1)
    counter.count(key, "T", 1)  # wakes the reporter, which hangs in send
    time.sleep(0.05)
    t0 = time.perf_counter()
    for _ in range(2000):
        counter.count(key, "T", 200)
    assert time.perf_counter() - t0 < 0.5, "counting waited on the reporter"
    stuck.set()
    rep.close(timeout_s=5.0)
    assert rep.failed >= 1 and "ConnectError" in (rep.last_error or "")
    assert sum(counter.take().values()) == 2001  # every count kept for the next report


def test_from_server_sends_versions_and_reports_misses(proc: Process) -> None:
    bundle = _tuned_bundle(proc)
    seen: dict[str, Any] = {"gets": [], "posts": []}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/v1/configs":
            seen["gets"].append(dict(request.url.params))
            return httpx.Response(200, json=bundle, headers={"ETag": '"b1"'})
        if request.method == "POST" and request.url.path == "/v1/misses":
            seen["posts"].append(json.loads(request.content))
            return httpx.Response(200, json={"recorded": 1})
        return httpx.Response(404, json={"detail": "no route"})

    client = KvtuneClient("http://kvtune", transport=httpx.MockTransport(handler))
    tk = TunedKernels.from_server("http://kvtune", heads=H, topk=TOPK, window=WINDOW, client=client,
                                  process=proc, report_interval_s=60.0, **COLD)
    (params,) = seen["gets"]
    assert params["triton"] == triton.__version__ and params["device"] == proc.device_name
    assert params["arch"] == proc.arch and params["heads"] == str(H)
    assert tk.config_for("decode", ("nvfp4_288", "fp8_528"), "T", 2, heads=H, topk=TOPK, window=WINDOW) == DECODE_T2
    tk.config_for("pack", ("nvfp4_288",), "N", 5_000_000)
    tk.close()
    (post,) = seen["posts"]
    assert post["misses"] == [{**tk.tables[("pack", ("nvfp4_288",))].key.to_json(), "dim": "N",
                               "n": 5_000_000, "count": 1}]


def test_a_bundle_from_another_triton_or_gpu_warns_once_or_is_refused(proc: Process) -> None:
    stale = _tuned_bundle(proc, version="0.0.1")
    with pytest.warns(UserWarning) as rec:
        tk = TunedKernels(stale, process=proc, **COLD)
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "decode nvfp4_288+fp8_528 T2-2: measured with Triton 0.0.1" in msg and "pack nvfp4_288 N1-64" in msg
    assert tk.config_for("decode", ("nvfp4_288", "fp8_528"), "T", 2, heads=H, topk=TOPK, window=WINDOW) == DECODE_T2
    with pytest.raises(rk.BundleMismatch, match="Triton 0.0.1"):
        TunedKernels(stale, process=proc, on_mismatch="error", **COLD)
    with pytest.raises(rk.BundleMismatch, match="measured on NVIDIA H100"):
        TunedKernels(_tuned_bundle(proc, device="NVIDIA H100"), process=proc, on_mismatch="error", **COLD)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the matching bundle: silent
        TunedKernels(_tuned_bundle(proc), process=proc, on_mismatch="error", **COLD)
    with pytest.raises(ValueError, match="on_mismatch"):
        TunedKernels(_tuned_bundle(proc), process=proc, on_mismatch="ignore", **COLD)  # type: ignore[arg-type]


def test_sources_and_arch_are_checked_and_illegal_configs_fall_back(proc: Process) -> None:
    b = _tuned_bundle(proc)
    b["kernels"]["decode"]["buckets"][1]["source_hash"] = "0123456789abcdef"
    with pytest.raises(rk.BundleMismatch, match="is not what this kvtune generates"):
        TunedKernels(b, process=proc, on_mismatch="error", **COLD)
    other = Process(arch="gfx942", device_name=proc.device_name, triton=proc.triton)
    b = _tuned_bundle(proc)  # made for this arch, served to an AMD process
    ptx = b["kernels"]["pack"]["buckets"][0]
    ptx["config"] = {**ptx["config"], "backend": "ptx"}
    with pytest.warns(UserWarning, match="config cannot run on gfx942"):
        tk = TunedKernels(b, process=other, warmup=False)
    assert tk.config_for("pack", ("nvfp4_288",), "N", 3)["backend"] == "soft"


def test_construction_warms_stored_keys_and_enumerates_the_rest(proc: Process, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, list[Any]] = {"warm": [], "keys_for": []}

    def fake_keys_for(name: str, key: Any, config: Config, bucket: Bucket, target: str, device: str = "cpu"):
        calls["keys_for"].append((name, bucket.name()))
        h = get_spec(name).render(key, config).source_hash
        return [WarmupKey.from_json(_fake_key(name, h, target, proc.triton, bucket.lo))]

    def fake_warm(keys: list[WarmupKey], sources: dict[str, str]) -> WarmReport:
        calls["warm"].append((list(keys), dict(sources)))
        return WarmReport(keys=len(keys), compiled=len(keys), seconds=0.0)

    monkeypatch.setattr(rk, "interpreting", lambda: False)
    monkeypatch.setattr(rk, "keys_for", fake_keys_for)
    monkeypatch.setattr(rk, "warm", fake_warm)
    b = _tuned_bundle(proc)
    tk = TunedKernels(b, process=proc)
    (warmed, sources), = calls["warm"]
    assert tk.warm_report is not None and tk.warm_report.keys == len(warmed)
    # The tuned buckets' stored keys are used as they are; every other bucket is enumerated here.
    assert ("decode", "T2-2") not in calls["keys_for"] and ("pack", "N1-64") not in calls["keys_for"]
    buckets = [(n, e["name"]) for n, k in b["kernels"].items() for e in k["buckets"]]
    assert sorted(calls["keys_for"]) == sorted(x for x in buckets if x not in (("decode", "T2-2"), ("pack", "N1-64")))
    stored = {json.dumps(k, sort_keys=True) for n in ("decode", "pack") for e in b["kernels"][n]["buckets"]
              if not e["default"] for k in e["warmup"]["keys"]}
    assert stored <= {json.dumps(k.to_json(), sort_keys=True) for k in warmed}
    assert all(k.source_hash in sources and sources[k.source_hash] for k in warmed)
    # Keys made for another Triton are not warmed as they are: that bucket is enumerated again.
    calls["keys_for"].clear()
    old = copy.deepcopy(b)
    old["kernels"]["decode"]["buckets"][1]["warmup"]["triton_version"] = "0.0.1"
    with pytest.warns(UserWarning, match="warmup keys made for Triton 0.0.1"):
        TunedKernels(old, process=proc)
    assert ("decode", "T2-2") in calls["keys_for"]


def test_export_round_trip_gives_the_same_configs_and_sources(proc: Process, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    b = _tuned_bundle(proc)
    tk0 = TunedKernels(b, process=proc, **COLD)
    sources = {h: tk0.sources[h] for k in b["kernels"].values() for h in needed_sources(k)}
    written = write_export(b, sources, tmp_path, proc.device_name)
    dev = proc.device_name.replace(" ", "_").replace("(", "_").replace(")", "_")
    assert (tmp_path / f"kernel=decode,heads={H},topk={TOPK},window={WINDOW},formats=nvfp4_288+fp8_528,"
                       f"device_name={dev}.json") in written
    assert sorted(p.name for p in (tmp_path / "sources").iterdir()) == sorted(f"{h}.py" for h in sources)
    back, back_sources = read_export(tmp_path, arch=proc.arch, heads=H, topk=TOPK, window=WINDOW,
                                     device_name=proc.device_name)
    assert back_sources == sources
    for name, k in b["kernels"].items():
        assert back["kernels"][name]["buckets"] == k["buckets"] and back["kernels"][name]["key"] == k["key"]
    monkeypatch.setenv("KVTUNE_CONFIG_FOLDER", str(tmp_path))
    tk = TunedKernels.from_folder(heads=H, topk=TOPK, window=WINDOW, process=proc, **COLD)
    assert not tk.mismatches
    assert {k: t.entries for k, t in tk.tables.items()} == {k: t.entries for k, t in tk0.tables.items()}
    # Another GPU's files beside this one's: each process reads its own; with two and neither its own, none.
    write_export(_tuned_bundle(proc, device="NVIDIA H100"), sources, tmp_path, "NVIDIA H100")
    back, _ = read_export(tmp_path, arch=proc.arch, heads=H, topk=TOPK, window=WINDOW, device_name="NVIDIA H100")
    assert back["kernels"]["decode"]["buckets"][1]["provenance"]["device_name"] == "NVIDIA H100"
    with pytest.raises(ExportError, match="2 GPUs' files"):
        read_export(tmp_path, arch=proc.arch, heads=H, topk=TOPK, window=WINDOW, device_name="NVIDIA B200")
    back, _ = read_export(tmp_path, arch=proc.arch, heads=8, topk=TOPK, window=WINDOW, device_name=proc.device_name)
    assert "decode" in back["unavailable"] and "decode" not in back["kernels"]


def test_export_refuses_missing_or_tampered_sources(proc: Process, tmp_path: Path) -> None:
    b = _tuned_bundle(proc)
    tk0 = TunedKernels(b, process=proc, **COLD)
    sources = {h: tk0.sources[h] for k in b["kernels"].values() for h in needed_sources(k)}
    h = b["kernels"]["decode"]["buckets"][1]["source_hash"]
    with pytest.raises(ExportError, match="no source text"):
        write_export(b, {k: v for k, v in sources.items() if k != h}, tmp_path, "GPU")
    with pytest.raises(ExportError, match="does not hash"):
        write_export(b, {**sources, h: "# edited\n"}, tmp_path, "GPU")
    assert not list(tmp_path.iterdir())  # nothing written
    write_export(b, sources, tmp_path, "GPU")
    (tmp_path / "sources" / f"{h}.py").write_text("# edited\n")
    with pytest.raises(ExportError, match="does not hash"):
        read_export(tmp_path, arch=proc.arch, heads=H, topk=TOPK, window=WINDOW)


def test_export_module_is_torch_free() -> None:
    code = "import sys, tuner.runtime.export, tuner.runtime; assert 'torch' not in sys.modules, 'torch imported'"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr


def test_enumerated_warmup_keys_cover_what_the_entry_point_launches() -> None:
    # What construction warms on an sm_90 GPU (every bucket's keys, enumerated here for that
    # target's specialisation rules) must cover each launch an engine's calls make: with and
    # without sinks and list lengths, window pages of 16 and 64, sizes across the buckets. On the
    # H200 a call without attn_sink once compiled while serving: the probes had launched with
    # sinks only.
    proc = Process(arch="sm_90", device_name="NVIDIA H200", triton=triton.__version__)
    tk = TunedKernels(defaults_bundle("sm_90", H, TOPK, WINDOW, kernels=["decode"]), process=proc, warmup=False)
    t = tk.tables[("decode", ("nvfp4_288", "fp8_528"))]
    warmed = {(k.fn, k.args, k.options) for e in t.entries for k in keys_for("decode", t.key, e.config, e.bucket, "sm_90")}
    backend, pools = backend_class("sm_90"), get_family("decode").pool_args()
    calls = 0
    for b, sink, page, lengths in ((1, False, 16, False), (1, True, 64, True), (2, False, 64, False),
                                   (5, True, 16, True), (17, False, 16, True), (64, True, 64, False)):
        with record_launches() as launches:
            _decode_call(tk, b, sink=sink, page=page, lengths=lengths)
        for la in launches:
            opts = tuple((k, v) for k, v in la.options.items())
            assert (la.fn.fn.__name__, launch_specs(la, backend, pools)[0], opts) in warmed, (b, sink, page, lengths)
            calls += 1
    assert calls >= 6 and tk.misses.total() == 0


def test_page_sizes_warm_the_binaries_of_an_engines_page_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # pack shifts by its cache's page size (a constexpr): an engine with 16-slot pages launches a
    # binary the tuner's 64-slot probes never made, and names its page size to have it warmed
    # (logits' and decode's wgmma kernels take theirs as constexprs too).
    # Enumerated for sm_90's rules as construction does on that GPU (the interpreter enumerates
    # nothing), then a real engine-side call at P=16 recorded and looked up among the keys.
    monkeypatch.setattr(rk, "interpreting", lambda: False)
    proc = Process(arch="sm_90", device_name="NVIDIA H200", triton=triton.__version__)
    bundle = defaults_bundle("sm_90", H, TOPK, WINDOW, formats={"pack": ["fp8_528"]}, kernels=["pack"])

    def shifts(tk: TunedKernels) -> set[Any]:
        return {a.spec for k in tk._warmup_keys(True) if k.fn == "pack_kernel"
                for a in k.args if a.name == "PAGE_SHIFT"}

    assert shifts(TunedKernels(bundle, process=proc, warmup=False, kernels=["pack"])) == {6}
    tk = TunedKernels(bundle, process=proc, warmup=False, kernels=["pack"], page_sizes=[16, 64, 16])
    assert tk.page_sizes == (16, 64) and shifts(tk) == {4, 6}
    warmed = {(k.fn, k.args, k.options) for k in tk._warmup_keys(True)}
    backend, pools = backend_class("sm_90"), get_family("pack").pool_args()
    cache = alloc_paged_cache("fp8_528", 4, 16)
    with record_launches() as launches:
        tk.pack(torch.randn(37, 512).to(torch.bfloat16), torch.randperm(64)[:37], cache, "fp8_528")
    (la,) = launches
    assert (la.fn.fn.__name__, launch_specs(la, backend, pools)[0], tuple(la.options.items())) in warmed
    # The indexer's logits kernels take the page size as their PAGE: the same for them.
    lg = defaults_bundle("sm_90", H, TOPK, WINDOW, kernels=["logits"])
    lg["kernels"]["logits"]["buckets"] = lg["kernels"]["logits"]["buckets"][:1]
    tk = TunedKernels(lg, process=proc, warmup=False, kernels=["logits"], page_sizes=[16])
    assert {a.spec for k in tk._warmup_keys(True) for a in k.args if a.name == "PAGE"} == {16, 64}
    with pytest.raises(ValueError, match="page_sizes must be positive ints"):
        TunedKernels(bundle, process=proc, warmup=False, page_sizes=[0])


def test_mixed_size_serving_loop_after_construction_compiles_nothing(device: str) -> None:
    # On a GPU this is the proof (construction warmed every key); under the interpreter nothing
    # ever compiles, so it checks that serving after construction runs and dispatches per bucket.
    tk = TunedKernels.defaults(detect().name, H, TOPK, WINDOW, kernels=["decode"])
    with no_compiles():
        for b, sink, lengths in ((1, False, False), (3, True, True), (2, False, True), (5, True, False),
                                 (1, True, True), (4, False, False)):
            _decode_call(tk, b, device, sink=sink, lengths=lengths)
    assert sum(v for (k, name), v in tk.calls.items() if k == "decode" and name != "miss") == 6
    assert tk.misses.total() == 0
