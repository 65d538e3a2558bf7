"""``python -m benchmarks <name>|all [--quick] [--no-doc]``: run comparisons side by side.

Each module ``benchmarks/<name>.py`` (names not starting with ``_``) is a benchmark. One that
exposes ``run(quick: bool) -> list[Result]`` is reported figure by figure; one that only has
``main()`` is run and reported as having run. The results are printed as a table and written to
the generated section of ``docs/benchmarks.md`` (between ``<!-- benchmarks:begin -->`` and
``<!-- benchmarks:end -->``), one block per benchmark, so running one benchmark updates only its
block and everything outside the markers (hand-written prose) is left alone.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from benchmarks._environment import load_average, machine_description
from benchmarks._report import Result, markdown_table, text_table

PACKAGE_DIR = Path(__file__).resolve().parent
DOC = PACKAGE_DIR.parent / "docs" / "benchmarks.md"
BEGIN, END = "<!-- benchmarks:begin -->", "<!-- benchmarks:end -->"
BLOCK = re.compile(
    r"<!-- benchmark:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /benchmark:(?P=name) -->\n", re.S)


def discover() -> list[str]:
    return sorted(p.stem for p in PACKAGE_DIR.glob("*.py") if not p.stem.startswith("_"))


@dataclass
class Outcome:
    name: str
    results: list[Result]
    seconds: float
    quick: bool
    load_before: str = ""
    error: str | None = None


def run_one(name: str, quick: bool) -> Outcome:
    load_before = load_average()
    started = time.monotonic()
    try:
        module = importlib.import_module(f"benchmarks.{name}")
        if hasattr(module, "run"):
            results = list(module.run(quick))
        elif hasattr(module, "main"):
            _run_main(module.main, name, quick)
            results = [Result(f"{name}: ran main()", None, "", notes="no run(quick) -> "
                              "list[Result]; see the module's own output")]
        else:
            raise RuntimeError(f"benchmarks/{name}.py has neither run(quick) nor main()")
    except BaseException as exc:  # noqa: BLE001 - one failing benchmark must not stop the rest
        if isinstance(exc, KeyboardInterrupt):
            raise
        traceback.print_exc()
        lines = [line.strip() for line in f"{type(exc).__name__}: {exc}".splitlines()
                 if line.strip()]
        detail = lines[0][:300] + (f" … {lines[-1][:300]}" if len(lines) > 1 else "")
        return Outcome(name, [Result(f"{name}: failed", None, "", met=False, notes=detail)],
                       time.monotonic() - started, quick, load_before, detail)
    return Outcome(name, results, time.monotonic() - started, quick, load_before)


def run_isolated(name: str, quick: bool) -> Outcome:
    """``run_one`` in a child interpreter: benchmarks run in sequence must not share a JVM, a
    SparkSession, imported state or leaked threads (one benchmark's Spark configuration broke
    the next one's). The child prints as it goes and hands its outcome back in a file."""
    with tempfile.TemporaryDirectory(prefix="bench_outcome_") as directory:
        path = Path(directory) / "outcome.pickle"
        command = [sys.executable, "-m", "benchmarks", name, "--no-doc", "--outcome-file",
                   str(path)] + (["--quick"] if quick else [])
        started = time.monotonic()
        code = subprocess.call(command)
        if path.exists():
            with path.open("rb") as f:
                return Outcome(**pickle.load(f))  # noqa: S301 - our own child's file
        detail = f"the benchmark's process exited with {code} before reporting"
        return Outcome(name, [Result(f"{name}: failed", None, "", met=False, notes=detail)],
                       time.monotonic() - started, quick, load_average(), detail)


def _run_main(main, name: str, quick: bool) -> None:  # type: ignore[no-untyped-def]
    params = inspect.signature(main).parameters
    if "quick" in params:
        main(quick=quick)
        return
    saved = sys.argv
    sys.argv = [f"benchmarks.{name}"]
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = saved
    if code not in (None, 0):
        raise RuntimeError(f"main() exited with {code}")


# -- docs/benchmarks.md -----------------------------------------------------------------------

def render_block(outcome: Outcome, machine: dict[str, str]) -> str:
    mode = "quick" if outcome.quick else "full"
    head = (f"### {outcome.name}\n\n"
            f"`python -m benchmarks {outcome.name}{' --quick' if outcome.quick else ''}` — "
            f"{mode} run, {machine['date']}, {outcome.seconds:.0f} s on {machine['cores']} "
            f"cores, load average {outcome.load_before} (1/5/15 min) before it started.\n\n")
    return head + markdown_table(outcome.results) + "\n\n"


def render_machine(machine: dict[str, str]) -> str:
    lines = ["Last run on:", ""]
    lines += [f"- **{k}**: {v}" for k, v in machine.items()]
    return "\n".join(lines) + "\n\n"


def update_doc(path: Path, outcomes: list[Outcome], machine: dict[str, str]) -> None:
    text = path.read_text() if path.exists() else (
        "# Benchmarks\n\nRun them with `python -m benchmarks all` (or one by name; `--quick` "
        "for a smaller data set). The section below is generated; write prose outside it.\n\n")
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        generated, after = rest.split(END, 1)
    else:
        before, generated, after = text.rstrip() + "\n\n", "", "\n"
    blocks = {m["name"]: m.group(0) for m in BLOCK.finditer(generated)}
    for outcome in outcomes:
        blocks[outcome.name] = (f"<!-- benchmark:{outcome.name} -->\n"
                                f"{render_block(outcome, machine)}"
                                f"<!-- /benchmark:{outcome.name} -->\n")
    section = (f"{BEGIN}\n<!-- generated by `python -m benchmarks`; edits here are "
               f"overwritten -->\n\n## Results\n\n{render_machine(machine)}"
               + "".join(blocks[n] for n in sorted(blocks)) + END)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(before + section + after)


def main(argv: list[str] | None = None) -> int:
    names = discover()
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark", nargs="+", help=f"all, or some of: {', '.join(names)}")
    parser.add_argument("--quick", action="store_true", help="smaller data sets, fewer samples")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--doc", type=Path, default=DOC, help=argparse.SUPPRESS)
    parser.add_argument("--outcome-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    chosen = names if args.benchmark == ["all"] else args.benchmark
    unknown = [n for n in chosen if n not in names]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}")
    # Spark's Python workers run the harness's interpreter (and see its packages), whatever
    # ``python3`` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if args.outcome_file is not None:  # a child of run_isolated: one benchmark, no report
        (name,) = chosen
        outcome = run_one(name, args.quick)
        with args.outcome_file.open("wb") as f:
            pickle.dump(vars(outcome), f)  # plain fields: the child's Outcome is __main__'s
        return 0
    machine = machine_description()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), flush=True)
    outcomes: list[Outcome] = []
    for name in chosen:
        print(f"\n== {name} ({'quick' if args.quick else 'full'}) ==", flush=True)
        outcome = run_isolated(name, args.quick) if len(chosen) > 1 else run_one(name, args.quick)
        outcomes.append(outcome)
        print(text_table(outcome.results), flush=True)
        print(f"({outcome.seconds:.1f} s)", flush=True)
        if not args.no_doc:  # after each benchmark, so a later crash loses nothing
            update_doc(args.doc, [outcome], machine)
    print("\n== summary ==")
    print(text_table([r for o in outcomes for r in o.results]))
    if not args.no_doc:
        print(f"\nwrote {args.doc}")
    return 1 if any(o.error for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
