"""Build the benchmark's kernels here (nvcc, no GPU) and pack them for the GPU machine.

A device call starts on a bare machine, so each call used to spend two minutes or more of its
ten rebuilding the kernels the last one built. Cache keys name the include folders by role, not
by path (`evt.codegen.nvcc.key_flags`), so an entry built here is found there when nvcc, CUTLASS
and evt's headers are the same; an entry whose key differs is simply built again there.

    python scripts/kernel_pack.py build --only 'bias*,dgrad*'   # plan (meta capture) and build
    python scripts/kernel_pack.py build --only '*' --dry-run    # which a device call would build
    python scripts/kernel_pack.py build --tests node_coverage   # a GPU test module's kernels
    python scripts/kernel_pack.py build --tests fuzz            # the fuzzer's seeds (28 kernels)
    python scripts/kernel_pack.py build --tests configs         # every candidate config (52)
    python scripts/kernel_pack.py pack                          # -> .kpack/kernels.tar.xz
    python scripts/kernel_pack.py consolidate   # .kpack's archives merged into kernels.tar.xz
    python scripts/kernel_pack.py consolidate --drop-stale   # ... less the entries no run finds
    device:  carry .kpack; scripts/device_env.sh unpacks every .kpack/*.tar.xz into
             $EVT_CACHE_DIR; at the end of the call
             python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-N.tar.xz
             sends back what the call built; copy it into .kpack/ to carry it next time

`build` captures each selected case at its real sizes on the meta device (`--capture cpu`: on the
CPU, for steps with pointwise convolutions) and builds its regions' kernels with the tile config
the run would pick (`evt.bench.prebuild`), into evt's kernel cache
(`$EVT_CACHE_DIR`, else ~/.cache/evt: outside .kpack, which travels); `--configs` adds each op
case's kernels at other tile configs (labels, as `benchmarks/config_sweep.py --configs` takes
them); `--autotune` builds every config max-autotune would time (`evt.runtime.autotune.shortlist`,
the heuristic's pick among them) instead, case after case in the order part 4 measures them.
`pack` writes every finished entry of
that cache (library, source, build log, integrity record) into one xz archive and says its size
(about 0.2 MiB a kernel): the carried tree has a 64 MiB limit, the wheels included; `--new` leaves
out the entries the carried archives already hold.
"""

from __future__ import annotations

import argparse
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACK = ROOT / ".kpack"
ARCHIVE = PACK / "kernels.tar.xz"


def selected(only: str, dtype_name: str) -> tuple[list, object]:
    """The bench cases `--only` selects (exits when none does) and the torch dtype named."""
    import torch

    from evt.bench.plan import make_plan

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    cases = make_plan(only=only, baselines="evt", device="meta").cases
    if not cases:
        sys.exit(f"kernel_pack: no case matches --only {only!r}")
    return cases, dtype


def plan_only(only: str, dtype_name: str, capture: str = "meta") -> dict[str, list[str]]:
    """`build --dry-run`: the selected cases' kernels at the configs their runs pick, none built:
    prints how many the carried archives (.kpack) hold, how many only the local cache holds
    (`pack --new` carries them) and which neither holds (a device call would build them, about a
    minute each there), and returns cache key -> the cases that need it."""
    from evt.bench.prebuild import jobs
    from evt.runtime import cache

    cases, dtype = selected(only, dtype_name)
    needed: dict[str, list[str]] = {}
    for case, job in jobs(cases, dtype, print, device=capture):
        needed.setdefault(job.key, []).append(case)
    carried = carried_keys()
    local = {k for k in needed if k not in carried and cache.read_meta(k) is not None}
    missing = {k: v for k, v in needed.items() if k not in carried and k not in local}
    print(f"{len(cases)} cases need {len(needed)} kernels: {len(needed) - len(local) - len(missing)} "
          f"in .kpack, {len(local)} only in {cache.root()} (pack --new carries them), "
          f"{len(missing)} in neither")  # fmt: skip
    for key, names in missing.items():
        shown = list(dict.fromkeys(names))
        print(f"  to build: {key[:16]}  {', '.join(shown[:4])}{' ...' if len(shown) > 4 else ''}")
    return needed


def build(
    only: str, dtype_name: str, configs: list[str], autotune: bool, capture: str = "meta"
) -> None:
    from evt.bench.plan import make_plan
    from evt.bench.prebuild import prebuild
    from evt.codegen.config import TileConfig
    from evt.runtime import cache

    cases, dtype = selected(only, dtype_name)
    print(f"{len(cases)} cases: {', '.join(c.name for c in cases)}")
    if autotune:
        from evt.runtime.autotune import shortlist

        # in the order part 4 measures them (breadth first: the first shape of every pattern,
        # the steps, then the other shapes), each case's whole shortlist (the heuristic's pick
        # among it) before the next's: a build cut short leaves whole cases, the first ones
        tuned = [i.case for i in make_plan(only=only, baselines="evt-max-autotune").items]
        n = prebuild(tuned, dtype, print, device=capture, configs=shortlist)  # steps' regions too
        print(f"{n} kernels on max-autotune's shortlists (EVT_AUTOTUNE_TOP and one per schedule)")
    else:
        n = prebuild(cases, dtype, print, device=capture)
        print(f"{n} kernels at the heuristic's configs in {cache.root()}")
    op_cases = [c for c in cases if c.kind == "op"]
    if configs:
        extra = [TileConfig.from_label(label) for label in configs]
        n = prebuild(op_cases, dtype, print, device=capture, configs=lambda spec, problem: extra)
        print(f"{n} kernels at {', '.join(configs)}")


# a GPU test module whose kernels `build --tests` builds ahead names them in one of these
KERNEL_LISTS = ("captured", "prebuilt_specs", "prebuilt_kernels")
TEST_KERNELS = re.compile(rf"^def ({'|'.join(KERNEL_LISTS)})\(", re.MULTILINE)


def test_modules() -> list[str]:
    """The NAMEs of `tests/test_gpu_NAME.py` that list their kernels for `build --tests`."""
    paths = sorted((ROOT / "tests").glob("test_gpu_*.py"))
    return [p.stem.removeprefix("test_gpu_") for p in paths if TEST_KERNELS.search(p.read_text())]


def build_tests(names: list[str]) -> None:
    """Build the kernels GPU test modules build first (`tests/test_gpu_NAME.py`'s `captured()`:
    its regions captured on the CPU at the GPU's sizes), each at the config the test's process
    would pick (`dispatch.build_for`), and its `prebuilt_specs()` at their default config (the
    fuzzer's) and its `prebuilt_kernels()` at their own configs (the config tests'), whichever it
    has, so the device call only runs the tests. Each entry of
    `captured()` starts from a fresh dispatch state, as each test does (the modules reset it per
    test): a kernel signature seen again at another problem is built at that problem's config."""
    import importlib

    from evt.runtime import dispatch

    sys.path.insert(0, str(ROOT))
    futures = []
    for name in names:
        try:
            module = importlib.import_module(f"tests.test_gpu_{name}")
        except ModuleNotFoundError as e:
            if e.name != f"tests.test_gpu_{name}":  # the module is there; something it imports is not
                raise
            sys.exit(f"kernel_pack: no tests/test_gpu_{name}.py")
        if not any(hasattr(module, f) for f in KERNEL_LISTS):
            sys.exit(f"kernel_pack: tests/test_gpu_{name}.py has none of captured(), "
                     "prebuilt_specs() and prebuilt_kernels(): its kernels are built inside "
                     "its tests")  # fmt: skip
        if hasattr(module, "prebuilt_specs") or hasattr(module, "prebuilt_kernels"):
            from evt.runtime import build

            # specs its tests build at their default config, or (spec, tile config) pairs
            pairs = [(spec, None) for spec in getattr(module, "prebuilt_specs", list)()]
            pairs += getattr(module, "prebuilt_kernels", list)()
            futures += [(spec.name, build.prefetch(spec, cfg)) for spec, cfg in pairs]
        for seen in getattr(module, "captured", dict)().values():
            dispatch.reset()
            for spec, problem in seen:
                future = dispatch.build_for(spec, problem)  # None: the test's region runs unfused
                futures += [(spec.name, future)] if future is not None else []
    failed = [name for name, f in futures if f.exception() is not None]
    for name in failed:
        print(f"kernel_pack: {name}: build failed")
    print(f"{len(futures) - len(failed)} of {len(futures)} test kernels built")


def carried_keys() -> set[str]:
    """The cache keys the archives in .kpack hold."""
    return set().union(*map(archive_keys, PACK.glob("*.tar.xz")))


def archive_keys(archive: Path) -> set[str]:
    """The cache keys (entry folders) one archive holds."""
    with tarfile.open(archive) as tar:
        return {name.split("/")[0] for name in tar.getnames()}


def pack(out: Path, new_only: bool) -> None:
    from evt.runtime import cache

    root = cache.root()
    skip = carried_keys() if new_only else set()
    entries = sorted(
        p for p in root.iterdir() if p.name not in skip and cache.read_meta(p.name) is not None
    )
    if not entries:
        print(f"kernel_pack: {root} holds no finished entry{' not carried' if new_only else ''}")
        return
    write_archive(entries, out)
    mib = out.stat().st_size / 2**20
    print(f"{out}: {len(entries)} kernels, {mib:.1f} MiB (carry .kpack: 64 MiB with the wheels)")


def write_archive(entries: list[Path], out: Path) -> None:
    """One xz tar of the cache entries `entries` (folders named by key), written atomically.
    Solid: files of one kind follow each other (every library, then every source, log and
    record) and the dictionary spans all of them, so what kernels share (CUTLASS's code, evt's
    templates) is stored once: session 34's 331 kernels took 12.1 MiB so against 21.4 in 21
    archives. `tar -xJf` reads it (its memory: the dictionary, at most 512 MiB)."""
    import lzma

    from evt.runtime import cache

    files = [(name, entry) for name in (cache.SO, cache.CU, cache.LOG, cache.META)
             for entry in entries if (entry / name).exists()]  # fmt: skip
    total = sum((entry / name).stat().st_size for name, entry in files)
    dict_size = min(max(total, 1 << 20), 512 << 20)
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": dict_size}]
    tmp = out.with_suffix(".tmp")
    with lzma.open(tmp, "wb", format=lzma.FORMAT_XZ, filters=filters) as xz:
        with tarfile.open(fileobj=xz, mode="w") as tar:
            for name, entry in files:
                tar.add(entry / name, arcname=f"{entry.name}/{name}")
    tmp.replace(out)


def is_current(entry: Path, compile_fn=None) -> bool:
    """Whether this checkout computes the cache entry's key again from its record (the region's
    spec and tile config, `evt.runtime.build.compile_job`'s meta) and the toolchain (`compile_fn`:
    nvcc's by default): False once a header it includes, the renderer, evt's version or the
    toolchain changed since it was built, so that no run looks it up any more. An entry with no
    such record counts as current (kept)."""
    import ast
    import json
    import re

    from evt import ir
    from evt.codegen.config import TileConfig
    from evt.runtime import build, cache

    meta_file = entry / cache.META
    if not meta_file.exists():
        return True
    meta = json.loads(meta_file.read_text())
    fields = re.fullmatch(r"TileConfig\((.*)\)", meta.get("config", ""))
    if "spec" not in meta or fields is None:
        return True
    kwargs = {k: ast.literal_eval(v) for k, v in re.findall(r"(\w+)=('[^']*'|[^,]+)", fields[1])}
    config = TileConfig(**kwargs)
    if repr(config) != meta["config"]:  # a field the pattern misread: do not judge it
        return True
    return build.plan(ir.from_json(meta["spec"]), config, compile_fn).key == entry.name


def consolidate(out: Path, drop_stale: bool = False, compile_fn=None) -> None:
    """Merge every archive in .kpack into `out` (one solid archive, each key once) and remove the
    merged ones once `out` holds every key they held; with `drop_stale`, less the entries
    `is_current` finds stale (built with `compile_fn`, nvcc by default)."""
    import tempfile

    from evt.runtime import cache

    archives = sorted(a for a in PACK.glob("*.tar.xz") if a.resolve() != out.resolve())
    if not archives:
        print(f"kernel_pack: {PACK} holds no archive to merge")
        return
    sources = [out, *archives] if out.exists() else archives
    before = sum(a.stat().st_size for a in sources)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for archive in sources:
            with tarfile.open(archive) as tar:
                tar.extractall(root, filter="data")
        # entries only: an archive packed from a whole cache folder may hold its failed builds
        entries = sorted(p for p in root.iterdir() if cache.is_entry(p))
        stale = [e for e in entries if drop_stale and not is_current(e, compile_fn)]
        entries = [e for e in entries if e not in stale]
        write_archive(entries, out)
    if archive_keys(out) != {e.name for e in entries}:
        sys.exit(f"kernel_pack: {out} lacks keys it was given; the archives are left as they were")
    for archive in archives:
        archive.unlink()
    after = out.stat().st_size
    dropped = f", {len(stale)} stale left out" if drop_stale else ""
    print(f"{out}: {len(entries)} kernels from {len(archives)} archives{dropped}, "
          f"{before / 2**20:.1f} -> {after / 2**20:.1f} MiB")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the selected cases' kernels into the local cache")
    b.add_argument("--only", default="", help="comma-separated globs, as evt bench --only")
    b.add_argument("--tests", default="",
                   help=f"comma-separated GPU test modules ({', '.join(test_modules())}: "
                        "tests/test_gpu_NAME.py) whose kernels to build")  # fmt: skip
    b.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    b.add_argument("--configs", default="", help="comma-separated tile-config labels to add")
    b.add_argument("--dry-run", action="store_true",
                   help="build nothing: say how many of the --only cases' kernels .kpack and the "
                        "local cache hold, and which a device call would still build")  # fmt: skip
    b.add_argument(
        "--autotune",
        action="store_true",
        help="build every config max-autotune would time for the selected cases' regions (the "
        "heuristic's pick among them), case by case in the order part 4 measures them",
    )
    b.add_argument(
        "--capture",
        default="meta",
        choices=("meta", "cpu"),
        help="where the cases are captured: meta (shapes only) or cpu (each case runs once on the "
        "CPU at its real sizes: meta lays a convolution's result out contiguously, so only a CPU "
        "capture finds the GEMMs of pointwise convolutions, e.g. step/resnet_bottleneck's)",
    )
    p = sub.add_parser("pack", help="archive the cache's finished entries")
    p.add_argument("--out", type=Path, default=ARCHIVE, help=f"the archive (default {ARCHIVE})")
    p.add_argument("--new", action="store_true", help="only entries no .kpack archive holds")
    c = sub.add_parser("consolidate", help="merge .kpack's archives into one solid archive")
    c.add_argument("--out", type=Path, default=ARCHIVE, help=f"the archive (default {ARCHIVE})")
    c.add_argument("--drop-stale", action="store_true",
                   help="leave out the entries whose key this checkout no longer computes (a "
                        "header, the renderer or the toolchain changed since they were built)")  # fmt: skip
    args = ap.parse_args()
    PACK.mkdir(exist_ok=True)
    if args.cmd == "build":
        if not (args.only or args.tests):
            ap.error("build needs --only (bench cases) or --tests (GPU test modules)")
        if args.dry_run:
            if args.tests or args.configs or args.autotune:
                ap.error("--dry-run takes --only cases at their own configs (no --tests, "
                         "--configs or --autotune)")  # fmt: skip
            plan_only(args.only, args.dtype, args.capture)
            return
        if args.only:
            configs = [c for c in args.configs.split(",") if c]
            build(args.only, args.dtype, configs, args.autotune, args.capture)
        if args.tests:
            build_tests([t for t in args.tests.split(",") if t])
    elif args.cmd == "consolidate":
        consolidate(args.out, args.drop_stale)
    else:
        pack(args.out, args.new)


if __name__ == "__main__":
    main()
