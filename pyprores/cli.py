"""Command line: ``pyprores compare``, ``inspect``, ``idct-accuracy``, ``corpus``, ``conformance`` and ``fuzz``.

Exit codes: 0 when every plane is within ``--max-dev``, 1 when a deviation
exceeds it, 2 for a failure the user can act on (bad file, no device, no
native extension, bad arguments) — reported as one ``pyprores: error:``
line, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Sequence

from . import __version__, builds
from .decode import candidate, demux
from .corpus import clips
from .check.compare import compare_file, summarize
from .decode.pipeline import DEFAULT_IN_FLIGHT, MAX_IN_FLIGHT
from .errors import DeviceError, NativeLibraryError, PyproresError
from .geometry import MB_SIZE
from .progress import ProgressBar
from .check.report import print_summary, write_json, write_maps

EXIT_OK, EXIT_DEVIATION, EXIT_ERROR = 0, 1, 2


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _in_flight(text: str) -> int:
    value = _positive(text)
    if value > MAX_IN_FLIGHT:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_IN_FLIGHT}, not {value}")
    return value


BUILD_HELP = ("FFmpeg build to run against: build/ffmpeg-NAME with the extension in build/native-NAME "
              "(e.g. 9.0.2; default: $PYPRORES_BUILD, else build/ffmpeg, the 7.1.5 build)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyprores", description="Check FFmpeg's Vulkan ProRes decoder against its software decoder.")
    parser.add_argument("--version", action="version", version=f"pyprores {__version__}")
    parser.add_argument("--build", metavar="NAME", help=BUILD_HELP)
    # also accepted after the command (pyprores compare --build 9.0.2)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--build", metavar="NAME", default=argparse.SUPPRESS, help=BUILD_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    cmp = add("compare", help="decode files both ways and report deviations per plane",
                         description="Compare the candidate decode of each FILE with FFmpeg's software "
                                     "decoder. Without FILE, small default clips are generated and compared.")
    cmp.add_argument("files", nargs="*", metavar="FILE",
                     help="files, or directories (their video files, recursively)")
    cmp.add_argument("--frames", type=_positive, metavar="N", help="compare only the first N frames of each file")
    cmp.add_argument("--device", metavar="D", action="append",
                     help="Vulkan device (index or name) for the candidate; with --jobs or --scheduler "
                          "repeat it to spread the workers over several (default there: all GPUs)")
    cmp.add_argument("--backend", choices=candidate.BACKENDS, default="vulkan",
                     help="candidate decoder path (default: vulkan)")
    cmp.add_argument("--json", metavar="OUT", help="write the JSON report to OUT ('-' for stdout)")
    cmp.add_argument("--map", metavar="OUT.png",
                     help="write a per-slice deviation map (one PNG per file: OUT-<name>.png for several)")
    cmp.add_argument("--max-dev", type=_non_negative, default=0, metavar="K",
                     help="exit 1 when any plane deviates by more than K (default 0: bit-exact)")
    cmp.add_argument("--worst", type=_non_negative, default=5, metavar="N",
                     help="how many worst slices to list per plane (default 5)")
    cmp.add_argument("--workdir", metavar="DIR", help="where to write the default clips (default: a temp dir)")
    cmp.add_argument("--quiet", action="store_true", help="print no table; only errors and the exit code")
    cmp.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="force the progress bar on or off (default: on when stderr is a terminal)")
    cmp.add_argument("--jobs", "-j", type=_positive, metavar="N",
                     help="check files in N worker processes (Dask LocalCluster), one Vulkan session each")
    cmp.add_argument("--scheduler", metavar="ADDRESS",
                     help="check files on an existing Dask cluster (e.g. tcp://host:8786)")
    cmp.add_argument("--results", metavar="DIR",
                     help="keep each finished file's result in DIR; a run started again skips them")
    cmp.add_argument("--in-flight", type=_in_flight, default=DEFAULT_IN_FLIGHT, metavar="N",
                     help="frames decoding at once on the Vulkan device (default %(default)s; 1: one frame "
                          "per call, as before); the report does not depend on it")
    cmp.set_defaults(func=cmd_compare)

    ins = add("inspect", help="show the frame header and slice table of one frame")
    ins.add_argument("file", metavar="FILE")
    ins.add_argument("--frame", type=_non_negative, default=0, metavar="N", help="0-based frame (default 0)")
    ins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ins.add_argument("--decode", action="store_true",
                     help="also decode the frame with both decoders and say which slices each concealed")
    ins.add_argument("--device", metavar="D", help="Vulkan device (index or name) for --decode")
    ins.set_defaults(func=cmd_inspect)

    acc = add("idct-accuracy", help="IEEE 1180 IDCT accuracy of the software and Vulkan decoders",
                         description="Encode the IEEE 1180-1990 random blocks (scaled to 10- and 12-bit "
                                     "samples) into ProRes frames, decode them with FFmpeg's software decoder "
                                     "and the Vulkan hwaccel, check that both agree exactly and report the "
                                     "accuracy limits. Exit 1 when the decoders differ (with --strict also "
                                     "when a limit fails).")
    acc.add_argument("--blocks", type=_positive, default=10000, metavar="N",
                     help="blocks per range and sign (default 10000, as IEEE 1180)")
    acc.add_argument("--device", metavar="D", help="Vulkan device (index or name)")
    acc.add_argument("--backend", choices=("both", "software", "vulkan"), default="both",
                     help="decoders to run (default both: they must agree exactly)")
    acc.add_argument("--bit-depth", type=int, choices=(10, 12), action="append", metavar="B",
                     help="10 or 12 (repeatable; default both)")
    acc.add_argument("--json", metavar="OUT", help="write the figures as JSON to OUT ('-' for stdout)")
    acc.add_argument("--strict", action="store_true", help="exit 1 also when an IEEE 1180 limit fails")
    acc.set_defaults(func=cmd_idct_accuracy)

    cor = add("corpus", help="generate the conformance corpus and its manifest",
                         description="Encode the conformance corpus with the build's ffmpeg (prores_ks and "
                                     "prores_aw) into OUTDIR and write OUTDIR/manifest.json with every clip's "
                                     "parameters and the software decoder's per-frame MD5s. --quick: an "
                                     "all-pairs subset at small sizes (CI); --full: the GPU corpus (see "
                                     "docs/CONFORMANCE.md).")
    cor.add_argument("outdir", metavar="OUTDIR", nargs="?")
    mode = cor.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="the CI subset (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full", help="the whole corpus")
    cor.add_argument("--ffmpeg", metavar="DIR",
                     help="FFmpeg build with bin/ffmpeg and bin/ffprobe (default: $PYPRORES_FFMPEG_DIR, "
                          "else build/ffmpeg of the checkout)")
    cor.add_argument("--jobs", "-j", type=_positive, metavar="N", help="parallel encodes (default: CPU count)")
    cor.add_argument("--recipes", action="store_true",
                     help="print the recipe list (TSV, as tools/gpu/conformance-gpu reads it) instead of encoding")
    cor.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="force the progress bar on or off (default: on when stderr is a terminal)")
    cor.set_defaults(func=cmd_corpus, mode="quick")

    con = add("conformance", help="check a corpus: Vulkan vs software and the manifest's MD5s",
                         description="Decode every clip of MANIFEST (a manifest.json or its directory) with the "
                                     "candidate and FFmpeg's software decoder, check the frames against each "
                                     "other and against the manifest's MD5s, and write a Markdown table. Exit 1 "
                                     "when any clip is not bit-exact.")
    con.add_argument("manifest", metavar="MANIFEST")
    con.add_argument("--device", metavar="D", action="append",
                     help="Vulkan device (index or name) for the candidate; with --jobs or --scheduler "
                          "repeat it to spread the workers over several (default there: all GPUs)")
    con.add_argument("--backend", choices=candidate.BACKENDS, default="vulkan",
                     help="candidate decoder path (default: vulkan)")
    con.add_argument("--out", metavar="FILE.md",
                     help="write the table into FILE.md (between its conformance markers when it has them; "
                          "default: print it)")
    con.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="force the progress bar on or off (default: on when stderr is a terminal)")
    con.add_argument("--jobs", "-j", type=_positive, metavar="N",
                     help="check clips in N worker processes (Dask LocalCluster), one Vulkan session each")
    con.add_argument("--scheduler", metavar="ADDRESS",
                     help="check clips on an existing Dask cluster (e.g. tcp://host:8786)")
    con.add_argument("--in-flight", type=_in_flight, default=DEFAULT_IN_FLIGHT, metavar="N",
                     help="frames decoding at once on the Vulkan device (default %(default)s; 1: one frame "
                          "per call); the table does not depend on it")
    con.set_defaults(func=cmd_conformance)

    fz = add("fuzz", help="mutation fuzzing of both decoders (crashes, hangs, slice isolation)",
                        description="Mutate ProRes packets (INPUT: video files, corpus directories or "
                                    "manifests, raw .bin packets; default: a built-in seed set) and decode "
                                    "every mutant with the software decoder and the Vulkan hwaccel in child "
                                    "processes. Exit 1 on any crash, hang, validation message, sanitizer "
                                    "report, slice-isolation failure or damage disagreement (a mutant the two "
                                    "decoders output, flag or refuse differently). See docs/ROBUSTNESS.md.")
    fz.add_argument("inputs", nargs="*", metavar="INPUT")
    fz.add_argument("--seed", type=_non_negative, default=1, help="run seed (default 1)")
    fz.add_argument("--count", type=_non_negative, default=None, metavar="N",
                    help="mutants to try (default 1000 without --time, else no limit)")
    fz.add_argument("--time", type=float, default=None, metavar="SECONDS", help="stop after SECONDS")
    fz.add_argument("--backend", choices=("both", "software", "vulkan"), default="both")
    fz.add_argument("--device", metavar="D", help="Vulkan device (index or name)")
    fz.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                    help="per-mutant time limit before a decode counts as a hang (default 30)")
    fz.add_argument("--no-validation", dest="validation", action="store_false",
                    help="run the Vulkan worker without the Khronos validation layer")
    fz.add_argument("--frames", type=_positive, default=1, metavar="N", help="seed packets per file (default 1)")
    fz.add_argument("--tag", default="apch", help="codec tag of raw .bin inputs (default apch)")
    fz.add_argument("--mutator", action="append", metavar="NAME",
                    help="use only these mutators (repeatable; see --list-mutators)")
    fz.add_argument("--list-mutators", action="store_true", help="print the mutators and exit")
    fz.add_argument("--no-minimise", dest="minimise", action="store_false",
                    help="do not minimise crashing or hanging inputs")
    fz.add_argument("--save-regressions", metavar="DIR",
                    help="save minimised crashing/hanging inputs to DIR (e.g. tests/data/regressions)")
    fz.add_argument("--out", metavar="PATH", help="write PATH.json and PATH.md (the summary)")
    fz.add_argument("--workdir", metavar="DIR", help="seed clips and worker logs (default: a temp dir)")
    fz.add_argument("--reproduce", type=_non_negative, metavar="INDEX",
                    help="regenerate mutant INDEX of --seed and describe it (with --save: write it)")
    fz.add_argument("--save", metavar="FILE.bin", help="with --reproduce: write the mutant packet")
    fz.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="force the progress bar on or off (default: on when stderr is a terminal)")
    fz.set_defaults(func=cmd_fuzz)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:          # argparse exits 2 on bad usage, 0 for --help
        return int(e.code or 0)
    try:
        if args.build is not None:
            # before anything loads pyprores.decode.native; inherited by worker processes
            builds.select(args.build)
        return args.func(args)
    except builds.BuildError as e:
        _error(str(e))
        return EXIT_ERROR
    except PyproresError as e:
        _error(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:          # e.g. piped into `head`: not an error of ours
        sys.stderr.close()
        return EXIT_OK


def _error(message: str) -> None:
    print(f"pyprores: error: {message}", file=sys.stderr)


# -- compare --------------------------------------------------------------------

def cmd_compare(args: argparse.Namespace) -> int:
    failed = False
    results = []
    parallel = (args.jobs or 1) > 1 or args.scheduler or args.results
    devices = args.device or []
    if len(devices) > 1 and not parallel:
        raise PyproresError("several --device need --jobs N or --scheduler")
    with ExitStack() as stack:
        note = ""
        if parallel:
            from . import cluster
            files = cluster.expand_inputs(args.files)
            if not files:
                workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="pyprores-"))
                files = [str(p) for p in clips.generate_defaults(workdir)]
            bar = ProgressBar("files", enabled=False if args.quiet else args.progress)
            try:
                results, failed = cluster.compare_files(
                    files, backend=args.backend, devices=devices, frames=args.frames, worst=args.worst,
                    jobs=args.jobs, scheduler=args.scheduler, results_dir=args.results, progress=bar,
                    on_error=_error, in_flight=args.in_flight)
            finally:
                bar.finish()
            files = []      # checked; the workers added their sessions' notes
        else:
            # Open the device first: a missing extension or GPU should fail fast.
            session = stack.enter_context(candidate.open_session(args.backend, devices[0] if devices else None))
            note = getattr(session, "note", "")     # e.g. validation left off for this device
            files = _expand(args.files)
            if not files:
                workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="pyprores-"))
                files = [str(p) for p in clips.generate_defaults(workdir)]
        for path in files:
            bar = ProgressBar(Path(path).name, enabled=False if args.quiet else args.progress)
            try:
                results.append(compare_file(path, session, args.frames, args.worst, bar,
                                            in_flight=args.in_flight))
            except (DeviceError, NativeLibraryError):
                raise            # nothing else can succeed either
            except PyproresError as e:
                failed = True    # report it, and still check the other files
                _error(str(e))
            finally:
                bar.finish()
    for r in results if note else ():
        r.notes.append(f"Vulkan device {note}")
    summary = summarize(results, args.max_dev)
    summary.backend = summary.backend or args.backend
    summary.ffmpeg = _build_info()
    if results and not args.quiet and args.json != "-":
        print_summary(summary, sys.stdout)
    if args.json:
        write_json(summary, args.json)
    if args.map and results:
        for written in write_maps(args.map, results):
            if not args.quiet and args.json != "-":
                print(f"deviation map: {written}")
    if failed:
        return EXIT_ERROR
    return EXIT_OK if summary.passed else EXIT_DEVIATION


def _build_info() -> dict | None:
    """The FFmpeg build the candidate ran on, for reports (None without the extension)."""
    try:
        native = candidate.load_native()
    except NativeLibraryError:
        return None
    info = getattr(native, "build_info", None)     # tests stand in a fake module
    return info() if callable(info) else None


def _expand(paths: list[str]) -> list[str]:
    """Directories among FILE arguments: their video files (see pyprores.cluster)."""
    import os
    if not any(os.path.isdir(p) for p in paths):
        return paths
    from .cluster import expand_inputs
    return expand_inputs(paths)


# -- idct-accuracy ----------------------------------------------------------------

def cmd_idct_accuracy(args: argparse.Namespace) -> int:
    from .idct import accuracy as idct_accuracy

    backends = ("software", "vulkan") if args.backend == "both" else (args.backend,)
    report = idct_accuracy.run(blocks=args.blocks, bit_depths=tuple(sorted(set(args.bit_depth or (10, 12)))),
                               backends=backends, device=args.device)
    report.command = " ".join(["pyprores idct-accuracy", f"--blocks {args.blocks}"]
                              + [f"--bit-depth {b}" for b in args.bit_depth or ()]
                              + ([f"--backend {args.backend}"] if args.backend != "both" else [])
                              + ([f"--device {args.device}"] if args.device else []))
    if args.json:
        text = json.dumps(report.to_dict(), indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    if args.json != "-":
        print(idct_accuracy.format_text(report))
    if not report.backends_agree or (args.strict and not report.passed):
        return EXIT_DEVIATION
    return EXIT_OK


# -- inspect --------------------------------------------------------------------

def cmd_inspect(args: argparse.Namespace) -> int:
    native = candidate.load_native()
    with demux.open(args.file) as src:
        packet, count = None, 0
        for data in src.packets():
            if count == args.frame:
                packet = data
                break
            count += 1
        if packet is None:
            raise PyproresError(f"{args.file} has {count} frame(s); --frame counts from 0")
        info = native.inspect(packet, src.info.codec_tag)
        tag = src.info.codec_tag
    decoded = decode_both(native, packet, tag, args.device) if args.decode else None
    if args.json:
        doc = {"file": args.file, "frame": args.frame, "packet_size": len(packet), "codec_tag": tag,
               "frame_info": dataclasses.asdict(info)}
        doc["frame_info"]["alpha"] = info.alpha
        if decoded is not None:
            doc["decoders"] = decoded
        print(json.dumps(doc, indent=2))
    else:
        print(inspect_text(args.file, args.frame, len(packet), tag, info, decoded))
    return EXIT_OK


def decode_both(native, packet: bytes, tag: str, device: str | None) -> dict:
    """What each decoder makes of the packet: status (ok, corrupt or error),
    decode_error_flags and the slices it concealed, [picture, slice]."""
    out = {}
    for backend in ("software", "vulkan"):
        try:
            with native.Session(backend, device if backend == "vulkan" else None) as s:
                f = s.decode(packet, tag)
            out[backend] = {"status": "corrupt" if f.corrupt else "ok", "error_flags": f.error_flags,
                            "concealed": [list(c) for c in f.concealed or ()]}
        except PyproresError as e:
            out[backend] = {"status": "error", "error": str(e), "concealed": None}
    return out


INTERLACE = {0: "progressive", 1: "interlaced, top field first", 2: "interlaced, bottom field first"}
ALPHA = {0: "none", 1: "8-bit", 2: "16-bit"}


def inspect_text(path: str, frame: int, size: int, tag: str, info, decoded: dict | None = None) -> str:
    """Frame header facts, then one slice table per picture (with --decode,
    a column naming the decoders that concealed each slice)."""
    lines = [f"{path}, frame {frame}: {size} bytes, codec tag {tag}",
             f"  {info.width}x{info.height}, {info.chroma_format[0]}:{info.chroma_format[1]}:"
             f"{info.chroma_format[2]}, {info.bit_depth}-bit ({info.pix_fmt}), alpha: "
             f"{ALPHA.get(info.alpha_info, info.alpha_info)}, "
             f"{INTERLACE.get(info.interlace_mode, f'interlace mode {info.interlace_mode}')}"]
    for p, pic in enumerate(info.pictures):
        lines.append(f"  picture {p} ({pic.field}): byte {pic.offset}, {pic.size} bytes, "
                     f"{pic.mb_width}x{pic.mb_height} MBs, slices of up to {1 << pic.log2_slice_mb_width} "
                     f"MBs, {len(pic.slices)} slices")
        header = ("slice", "mb_x", "mb_y", "MBs", "x", "row", "offset", "size", "qscale")
        rows = [header] + [(s.index, s.mb_x, s.mb_y, s.mb_count, s.mb_x * MB_SIZE, s.mb_y * MB_SIZE,
                            s.offset, s.size, s.qscale) for s in pic.slices]
        if decoded is not None:
            by = {b: {tuple(c) for c in d.get("concealed") or ()} for b, d in decoded.items()}
            rows = [rows[0] + ("concealed by",)] + [
                r + (",".join(b for b in ("software", "vulkan") if (p, r[0]) in by[b]) or "-",)
                for r in rows[1:]]
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        lines += ["    " + "  ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in rows]
    for b, d in (decoded or {}).items():
        what = d["status"] if d["status"] != "error" else f"error ({d.get('error', '')})"
        n = len(d["concealed"] or ())
        lines.append(f"  {b}: {what}" + (f", {n} slice(s) concealed" if n else ""))
    return "\n".join(lines)


# -- corpus and conformance ----------------------------------------------------------

def _ffmpeg_dir(arg: str | None) -> Path:
    """--ffmpeg DIR, else the selected build's (--build, $PYPRORES_BUILD), else
    $PYPRORES_FFMPEG_DIR, else build/ffmpeg of the checkout."""
    return Path(arg) if arg else builds.ffmpeg_dir()


def cmd_corpus(args: argparse.Namespace) -> int:
    from . import corpus
    if args.recipes:
        sys.stdout.write(corpus.recipes_tsv(corpus.recipes_for(args.mode)))
        return EXIT_OK
    if not args.outdir:
        raise PyproresError("OUTDIR is required (unless --recipes)")
    bar = ProgressBar(f"corpus ({args.mode})", enabled=args.progress)
    try:
        path = corpus.generate(args.outdir, args.mode, _ffmpeg_dir(args.ffmpeg), jobs=args.jobs,
                               progress=bar, command=_command_line("corpus", args))
    finally:
        bar.finish()
    doc = json.loads(path.read_text())
    frames = sum(c["frames"] for c in doc["clips"])
    print(f"{len(doc['clips'])} clips, {frames} frames: {path}")
    return EXIT_OK


def cmd_conformance(args: argparse.Namespace) -> int:
    from .corpus import conformance
    bar = ProgressBar("conformance", enabled=args.progress)
    devices = args.device or []
    if (args.jobs or 1) > 1 or args.scheduler:
        from . import cluster
        check_all = cluster.conformance_clips(backend=args.backend, devices=devices, jobs=args.jobs,
                                              scheduler=args.scheduler, in_flight=args.in_flight)
        try:
            result = conformance.run(args.manifest, progress=bar, check_all=check_all)
        finally:
            bar.finish()
    else:
        if len(devices) > 1:
            raise PyproresError("several --device need --jobs N or --scheduler")
        with candidate.open_session(args.backend, devices[0] if devices else None) as session:
            try:
                result = conformance.run(args.manifest, session, progress=bar, in_flight=args.in_flight)
            finally:
                bar.finish()
    result.build = _build_info()
    section = conformance.markdown(result, _command_line("conformance", args))
    if args.out:
        conformance.write_markdown(args.out, section)
        bad = [c.name for c in result.clips if not c.passed]
        print(f"{len(result.clips) - len(bad)}/{len(result.clips)} clips bit-exact on {result.device}"
              + (f"; not: {', '.join(bad)}" if bad else "") + f" — table in {args.out}")
    else:
        sys.stdout.write(section)
    return EXIT_OK if result.passed else EXIT_DEVIATION


def cmd_fuzz(args: argparse.Namespace) -> int:
    from . import fuzz
    if args.list_mutators:
        for name in fuzz.MUTATORS:
            print(f"{name}\t{'one slice (isolation checked)' if name in fuzz.SLICE_MUTATORS else 'whole packet'}")
        return EXIT_OK
    bad = sorted(set(args.mutator or ()) - set(fuzz.MUTATORS))
    if bad:
        raise PyproresError(f"unknown mutator(s) {', '.join(bad)}; see --list-mutators")
    count = args.count if args.count is not None else (None if args.time else 1000)
    config = fuzz.FuzzConfig(
        inputs=list(args.inputs), seed=args.seed, count=count, time_limit=args.time,
        backends=fuzz.BACKENDS if args.backend == "both" else (args.backend,), device=args.device,
        timeout=args.timeout, validation=args.validation, frames=args.frames, tag=args.tag,
        mutators=tuple(args.mutator) if args.mutator else fuzz.MUTATORS, minimise=args.minimise,
        save_regressions=args.save_regressions, workdir=args.workdir,
        # the command as typed, global options (--build NAME) before "fuzz" included
        command=" ".join(["pyprores", *sys.argv[1:]]) if "fuzz" in sys.argv[1:4] else "pyprores fuzz")
    if args.reproduce is not None:
        m, seed = fuzz.reproduce(config, args.reproduce)
        print(f"mutant {args.reproduce} of seed {args.seed}: {m.mutator} ({m.detail}) of {m.seed_name}, "
              f"codec tag {m.tag}, {len(m.data)} bytes (seed packet {len(seed.data)} bytes)")
        if args.save:
            Path(args.save).write_bytes(m.data)
            print(f"written: {args.save}")
        return EXIT_OK
    bar = ProgressBar("fuzz", enabled=args.progress)
    if args.progress is None and not bar.enabled:
        bar = fuzz.LogProgress()          # a log: one line a minute
    try:
        report = fuzz.run(config, progress=bar)
    finally:
        bar.finish()
    print(fuzz.format_text(report))
    if args.out:
        for path in fuzz.write_reports(report, args.out):
            print(f"written: {path}")
    return EXIT_OK if report.passed else EXIT_DEVIATION


def _command_line(name: str, args: argparse.Namespace) -> str:
    """The command as a user would type it (for reports)."""
    prog = f"pyprores --build {args.build}" if getattr(args, "build", None) else "pyprores"
    if name == "corpus":
        parts = [f"{prog} corpus", args.outdir, f"--{args.mode}"]
        if args.ffmpeg:
            parts.append(f"--ffmpeg {args.ffmpeg}")
    else:
        parts = [f"{prog} conformance", args.manifest]
        parts += [f"--device {d}" for d in args.device or ()]
        if args.backend != "vulkan":
            parts.append(f"--backend {args.backend}")
        if getattr(args, "jobs", None):
            parts.append(f"--jobs {args.jobs}")
        if getattr(args, "scheduler", None):
            parts.append(f"--scheduler {args.scheduler}")
        if getattr(args, "in_flight", DEFAULT_IN_FLIGHT) != DEFAULT_IN_FLIGHT:
            parts.append(f"--in-flight {args.in_flight}")
        if args.out:
            parts.append(f"--out {args.out}")
    return " ".join(parts)
