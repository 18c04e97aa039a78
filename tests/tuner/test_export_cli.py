"""`kvtune export` from the database, then `TunedKernels.from_folder` on what it wrote: the same
configs and the same sources as the database serves, with no server and no database at read time."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.core import Bucket, TrialStatus
from catalog.families import get_spec
from catalog.keys import make_key
from catalog.results import BucketResult, TrialRecord, TuneResult
from db import configs, migrate
from db.bundles import BundleRequest, read_bundle
from db.session import Database
from kvtune.cli import main
from tuner.runtime import TunedKernels, read_export
from tuner.runtime.kernels import this_process

SHAPE = {"heads": 16, "topk": 512, "window": 128}


def _publish_decode(db: Database, device: str) -> dict[str, object]:
    """A tuned decode config for T=1 (another split count than the default), published with its source."""
    key = make_key("decode", "interp", **SHAPE)
    spec = get_spec("decode")
    default = spec.default_config(key)
    tuned = default.replace(NUM_SPLITS=4)
    b = Bucket("T", 1, 1)
    d = TrialRecord(number=0, bucket=b, config=default, status=TrialStatus.OK, time_us=20.0, timing="cpu-interpreter")
    t = TrialRecord(number=1, bucket=b, config=tuned, status=TrialStatus.OK, time_us=10.0, timing="cpu-interpreter")
    result = TuneResult(key=key, target="interp", buckets=(BucketResult(bucket=b, default=d, best=t, trials=(d, t)),),
                        device_name=device, triton_version="3.6.0", torch_version="2.13.0", timing="cpu-interpreter")
    rendered = spec.modules(key, tuned)

    def tx(s):  # noqa: ANN001, ANN202
        configs.store_sources(s, [(r.source_hash, r.template, r.source) for r in rendered])
        configs.publish(s, job_id=None, key=key, result=result, source_hashes={b.name(): rendered[0].source_hash})

    db.run(tx)
    return tuned.as_dict()


def test_kvtune_export_from_the_database_round_trips_through_from_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kvtune.db'}"
    db = Database(url)
    migrate.upgrade(db)
    device = this_process().device_name
    tuned = _publish_decode(db, device)
    served = read_bundle(db, BundleRequest("interp", **SHAPE)).bundle
    db.dispose()
    out = tmp_path / "export"
    assert main(["export", "--arch", "interp", "--out", str(out), "--database-url", url]) == 0
    names = sorted(p.name for p in out.glob("*.json"))
    dev = device.replace(" ", "_").replace("(", "_").replace(")", "_")
    assert f"kernel=decode,heads=16,topk=512,window=128,formats=nvfp4_288+fp8_528,device_name={dev}.json" in names
    bundle, sources = read_export(out, arch="interp", device_name=device, **SHAPE)
    for name, k in served["kernels"].items():
        assert bundle["kernels"][name]["buckets"] == k["buckets"], name
    assert all((out / "sources" / f"{h}.py").read_text() == src for h, src in sources.items())
    tk = TunedKernels.from_folder(out, arch="interp", **SHAPE)
    pair = ("nvfp4_288", "fp8_528")
    assert tk.config_for("decode", pair, "T", 1, **SHAPE).as_dict() == tuned
    assert tk.config_for("decode", pair, "T", 2, **SHAPE).as_dict() == get_spec("decode").default_config(
        make_key("decode", "interp", **SHAPE)).as_dict()


def test_kvtune_export_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'kvtune.db'}"
    migrate.upgrade(Database(url))
    # Nothing tuned: the GPU the files are for cannot be told from the configs.
    assert main(["export", "--arch", "interp", "--out", str(tmp_path / "x"), "--database-url", url]) == 2
    assert "--device-name" in capsys.readouterr().err
    assert main(["export", "--arch", "interp", "--out", str(tmp_path / "x"), "--database-url", url,
                 "--device-name", "NVIDIA H200"]) == 0
    assert len(list((tmp_path / "x").glob("*device_name=NVIDIA_H200.json"))) == 3
