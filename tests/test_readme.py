"""The README works as written, offline, followed in order on one real `metaservice serve`: the
curl walk-through, then the built-in catalog's pyiceberg and DuckDB blocks (read sessions included);
the Spark examples it quotes are the files in `examples/`, and Spark 3.5's section runs through
`engines/spark35/install.sh` (as do docs/engines.md's blocks, one script in order). The From Spark
section's commands run in tests/spark_plugin/test_examples.py. Every section with a code block
is covered by one of these (``test_every_code_block_is_run``).

The walk-through's bash blocks run in order in one bash process, each command exactly as
written; the only change is the server's address (`http://127.0.0.1:8000` becomes the test
server's) and a `curl` function that calls the real curl with `-sS` and keeps each answer's
status and body for the checks. Each answer shown in a comment under (or after) a command is
checked against the real answer:

- ``# {...}``, ``# 409 {...}`` or ``# {...} 409`` (continued on comment lines indented by two or
  more spaces) is JSON, except that ``$NAME`` stands for the shell variable's value at the end
  of the run and ``...`` means "and more": as an object member, other members; as a value, any
  value; in a list, other items around the ones shown (which must appear in that order); at the
  end of a string, any rest. Objects always match when they hold at least the members shown,
  so a field the server adds never breaks a check.
- ``# 204`` is a status alone.
- A command with no status shown must answer 2xx.
- A command whose comment shows a status prints it (``curl -s -w ' %{http_code}\\n'``): what a
  user sees is what the comment shows, and the printed status is the answer's.

Python blocks run in this interpreter (the README's ``.venv/bin/python``); a comment under a
``print(...)`` is what it prints (a prefix of the line). SQL blocks run in ``metaservice duckdb``
(with ``-csv -noheader``, to read its answers): a ``-- values`` comment on a SELECT is its row, a
``-- refused`` one a statement that must fail.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.metaservice.test_durability import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WALKTHROUGH_SECTIONS = ("A two-job pipeline in curl", "Barriers and consistent versions in curl",
                        "Leases and safe expiration in curl",
                        "Operators: delay, rollback, dashboard, metrics")
README_URL = "http://127.0.0.1:8000"
CATALOG_SECTION = "The built-in Iceberg catalog"
SPARK35_SECTION = "Spark 3.5 and the Iceberg runtime"
CONTRIBUTING_SECTION = "Contributing"
ENGINES = ROOT / "docs" / "engines.md"

_MORE_KEY = "\u2026more"
_ANY = "\u2026any"


# -- reading the README --------------------------------------------------------------------


def sections(text: str) -> dict[str, str]:
    """``## title`` → the section's text."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def code_blocks(text: str, languages: tuple[str, ...]) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text,
                                            flags=re.MULTILINE | re.DOTALL)
            if m.group(1) in languages]


@dataclass
class Command:
    text: str
    answer: str | None = None  # the comment shown as its answer
    comments: list[str] = field(default_factory=list)


def _split_inline_comment(line: str) -> tuple[str, str | None]:
    """``cmd  # comment`` → (cmd, comment); the walk-through's commands hold no ``#``."""
    if "#" not in line:
        return line, None
    code, comment = line.split("#", 1)
    return code.rstrip(), comment.strip()


def commands(block: str) -> list[Command]:
    """The block's commands (backslash continuations joined) with their answer comments."""
    result: list[Command] = []
    lines = block.splitlines()
    i = 0
    in_answer = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            in_answer = False
            i += 1
            continue
        if stripped.startswith("#"):
            body = stripped[1:]
            if in_answer and re.match(r"\s{2,}\S", body):
                result[-1].answer = f"{result[-1].answer} {body.strip()}"
            elif result and _is_answer(body.strip()) and result[-1].answer is None:
                result[-1].answer, in_answer = body.strip(), True
            else:
                in_answer = False
                if result:
                    result[-1].comments.append(body.strip())
            i += 1
            continue
        parts = []
        comment = None
        while True:
            code, comment = _split_inline_comment(lines[i])
            parts.append(code)
            if not code.endswith("\\"):
                break
            i += 1
        i += 1
        command = Command("\n".join(parts))
        in_answer = False
        if comment is not None and _is_answer(comment):
            command.answer, in_answer = comment, True
        result.append(command)
    return result


def _is_answer(comment: str) -> bool:
    return bool(re.match(r"^(\{|\d{3}(\s*$|\s+\{))", comment))


def walkthrough(text: str) -> list[Command]:
    found = sections(text)
    result = []
    for title in WALKTHROUGH_SECTIONS:
        assert title in found, f"README section {title!r} is missing"
        for block in code_blocks(found[title], ("bash", "sh")):
            result.extend(commands(block))
    return result


# -- answer patterns -----------------------------------------------------------------------


def parse_pattern(answer: str, variables: dict[str, str]) -> tuple[int | None, Any]:
    """``"409 {...}"`` → (409, the JSON pattern); ``"204"`` → (204, None)."""
    match = re.match(r"^(\d{3})\s*(.*)$", answer)
    after = re.match(r"^(\{.*\})\s+(\d{3})$", answer, flags=re.DOTALL)  # `curl -w`'s order
    if after:
        status, text = int(after.group(2)), after.group(1)
    else:
        status, text = (int(match.group(1)), match.group(2)) if match else (None, answer)
    if not text:
        return status, None

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        assert name in variables, f"the README's answer names ${name}, which the run never set"
        return variables[name]

    text = re.sub(r"\$([A-Z][A-Z0-9_]*)", value, text)
    # `...` outside strings: a member (other members) or an item/value (anything).
    out: list[str] = []
    stack: list[str] = []
    in_string = False
    i = 0
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("...", i):
            previous = "".join(out).rstrip()[-1:]
            if stack and stack[-1] == "{" and previous in ("{", ","):
                out.append(json.dumps(_MORE_KEY) + ": 0")
            else:
                out.append(json.dumps(_ANY))
            i += 3
            continue
        else:
            if c in "{[":
                stack.append(c)
            elif c in "}]":
                stack.pop()
            out.append(c)
        i += 1
    try:
        return status, json.loads("".join(out))
    except json.JSONDecodeError as exc:
        raise AssertionError(f"the README's answer is not a pattern: {answer!r}: {exc}") from exc


def matches(pattern: Any, actual: Any) -> bool:
    if pattern == _ANY:
        return True
    if isinstance(pattern, dict):
        return isinstance(actual, dict) and all(
            key == _MORE_KEY or (key in actual and matches(value, actual[key]))
            for key, value in pattern.items())
    if isinstance(pattern, list):
        if not isinstance(actual, list):
            return False
        items = [p for p in pattern if p != _ANY]
        if len(items) == len(pattern):
            return len(actual) == len(pattern) and all(map(matches, pattern, actual))
        position = 0
        for item in items:  # an ordered subsequence
            while position < len(actual) and not matches(item, actual[position]):
                position += 1
            if position == len(actual):
                return False
            position += 1
        return True
    if isinstance(pattern, str) and pattern.endswith("..."):
        return isinstance(actual, str) and actual.startswith(pattern[:-3])
    return type(pattern) is type(actual) and pattern == actual


def test_patterns_hold_what_they_show_and_nothing_else() -> None:
    variables = {"B": "20", "L": "abc"}
    _, pattern = parse_pattern('{"barrier":$B,"ids":[1, ...],"lease":"$L","m":"cycle: ...",...}',
                               variables)
    assert matches(pattern, {"barrier": 20, "ids": [0, 1, 2], "lease": "abc", "m": "cycle: x",
                             "added": True})
    assert not matches(pattern, {"barrier": 21, "ids": [1], "lease": "abc", "m": "cycle: x"})
    assert not matches(pattern, {"barrier": 20, "ids": [2], "lease": "abc", "m": "cycle: x"})
    assert not matches(pattern, {"barrier": 20, "ids": [1], "lease": "abd", "m": "cycle: x"})
    assert not matches(pattern, {"barrier": 20, "ids": [1], "lease": "abc"})
    _, exact_list = parse_pattern('{"a":[1,2],"b":...}', {})
    assert matches(exact_list, {"a": [1, 2], "b": None})
    assert not matches(exact_list, {"a": [1, 2, 3], "b": None})
    assert not matches(exact_list, {"a": [1, 2]})
    assert not matches(parse_pattern('{"n":1}', {})[1], {"n": True})
    assert parse_pattern("204", {}) == (204, None)
    assert parse_pattern('{"error":{"code":"x"}} 409', {}) == (409, {"error": {"code": "x"}})
    block = ("curl -X POST $U/a \\\n     -d '{}'   # {\"x\":1,\n#   \"y\":2}\n"
             "# prose\ncurl $U/b\n# 409 {\"error\":...}\n")
    parsed = commands(block)
    assert [(c.text, c.answer) for c in parsed] == [
        ("curl -X POST $U/a \\\n     -d '{}'", '{"x":1, "y":2}'),
        ("curl $U/b", '409 {"error":...}')]


# -- running it ----------------------------------------------------------------------------


@dataclass
class Answer:
    status: int | None
    body: str


def run_walkthrough(steps: list[Command], url: str, work: Path) -> tuple[list[Answer],
                                                                          dict[str, str]]:
    names = sorted({name for step in steps if step.answer
                    for name in re.findall(r"\$([A-Z][A-Z0-9_]*)", step.answer)})
    results = work / "answers"
    script = [
        f"exec 3>{results}",
        f"__H={work / 'headers'} __B={work / 'body'}",
        'curl() { : > "$__H"; : > "$__B"; command curl -sS -D "$__H" "$@" | tee "$__B"; }',
        "__answer() { printf '\\n@@answer %s\\n' \"$(awk 'NR==1 {print $2}' \"$__H\")\" >&3; "
        "cat \"$__B\" >&3; : > \"$__H\"; : > \"$__B\"; }",
        ': > "$__H"; : > "$__B"',
    ]
    for step in steps:
        script += [step.text.replace(README_URL, url), "__answer"]
    script += [f"printf '\\n@@var {n}=%s\\n' \"${n}\" >&3" for n in names]
    done = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True,
                          timeout=300, cwd=work)
    assert done.returncode == 0, done.stderr
    answers: list[Answer] = []
    variables: dict[str, str] = {}
    for chunk in results.read_text().split("\n@@")[1:]:
        head, _, body = chunk.partition("\n")
        if head.startswith("var "):
            key, _, value = head[4:].partition("=")
            variables[key] = value
        else:
            status = head.split(" ", 1)[1].strip() if " " in head else ""
            answers.append(Answer(int(status) if status else None, body.strip()))
    assert len(answers) == len(steps)
    return answers, variables


@pytest.fixture
def server_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    if backend == "sqlite":
        database_url = f"sqlite:///{tmp_path / 'metaservice.db'}"
    else:
        request.getfixturevalue("database")  # the session's PostgreSQL schema, wiped
        database_url = request.getfixturevalue("database_url")
    server = ServerProcess(database_url, tmp_path / "server.log",
                           env={"METASERVICE_WAREHOUSE": str(tmp_path / "warehouse")})
    server.start()
    yield server.url
    server.kill()


def user_environment() -> dict[str, str]:
    """The test session's environment without its catalog and server settings (a user's shell
    has neither until the README sets them)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYICEBERG_CATALOG__", "METASERVICE_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def printed(block: str) -> list[str]:
    """The comments under a ``print(...)`` line of a Python block: what it prints."""
    lines = block.splitlines()
    shown = []
    for before, line in zip(lines, lines[1:], strict=False):
        if "print(" in before and line.startswith("# "):
            shown.append(line[2:])
    return shown


def run_python(block: str, url: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", block.replace(README_URL, url)], cwd=cwd,
                          env=user_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"README block:\n{block}\nstderr:\n{done.stderr[-4000:]}"
    out = done.stdout.splitlines()
    for line in printed(block):
        assert any(o.startswith(line) for o in out), (
            f"the README shows {line!r}; the block printed:\n{done.stdout}")
    return done.stdout


def run_sql(block: str, url: str, cwd: Path) -> None:
    """The block in `metaservice duckdb`, as a user pipes it in."""
    done = subprocess.run([sys.executable, "-m", "metaservice", "duckdb", "-csv", "-noheader"],
                          input=block.replace(README_URL, url), cwd=cwd, env=user_environment(),
                          capture_output=True, text=True, timeout=300)
    statements = [line for line in block.splitlines() if line.strip()]
    refused = [line for line in statements if "-- refused" in line]
    rows = [line.split("--", 1)[1].strip().replace(", ", ",") for line in statements
            if line.startswith("SELECT") and "--" in line]
    where = f"README block:\n{block}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == (1 if refused else 0), where
    assert done.stdout.split() == rows, where
    if refused:
        assert "table_has_writer" in done.stderr, where
    else:
        assert done.stderr == "", where


def run_catalog_section(text: str, url: str, cwd: Path) -> None:
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", sections(text)[CATALOG_SECTION],
                        flags=re.MULTILINE | re.DOTALL)
    assert [language for language, _ in blocks] == ["python", "sql", "python", "sql"]
    for language, block in blocks:
        if language == "python":
            run_python(block, url, cwd)
        else:
            run_sql(block, url, cwd)


@pytest.mark.slow  # `metaservice serve` as a process, curl, DuckDB
def test_the_readme_in_order_on_one_server(server_url: str, tmp_path: Path) -> None:
    """The curl walk-through answers as shown, and the built-in catalog's blocks then run as
    written on the same server: nothing the walk-through leaves behind gets in their way."""
    text = README.read_text()
    check_walkthrough_answers(text, server_url, tmp_path)
    run_catalog_section(text, server_url, tmp_path)


def check_walkthrough_answers(text: str, server_url: str, tmp_path: Path) -> None:
    for tool in ("bash", "curl", "jq"):
        if shutil.which(tool) is None:
            pytest.fail(f"the README's walk-through needs {tool} (install it)")
    steps = walkthrough(text)
    assert sum(1 for s in steps if s.answer) >= 20, "the walk-through shows its answers"
    answers, variables = run_walkthrough(steps, server_url, tmp_path)
    # Barriers are real times: the walk-through's lags are seconds, not decades.
    assert 0 < time.time() * 1000 - int(variables["B1"]) <= 600_000
    for step, answer in zip(steps, answers, strict=True):
        where = f"README command:\n{step.text}\nanswered {answer.status}: {answer.body[:2000]}"
        if answer.status is None:  # not a request (a variable set in the shell)
            assert step.answer is None, where
            continue
        expected_status, pattern = (parse_pattern(step.answer, variables) if step.answer
                                    else (None, None))
        body = answer.body
        if expected_status is None:
            assert 200 <= answer.status < 300, where
        else:
            assert answer.status == expected_status, where
            # the status the comment shows is on the user's screen too
            assert "-w ' %{http_code}\\n'" in step.text or "-w '%{http_code}\\n'" in step.text, (
                f"{where}\nthe comment shows a status that the command does not print")
            printed = re.fullmatch(r"(.*?)\s*(\d{3})", body, flags=re.DOTALL)
            assert printed and int(printed.group(2)) == answer.status, where
            body = printed.group(1)
        if pattern is not None:
            assert matches(pattern, json.loads(body)), (
                f"{where}\nthe README shows: {step.answer}")


# -- the Spark example ---------------------------------------------------------------------


def test_the_readme_quotes_the_spark_example_verbatim() -> None:
    example = (ROOT / "examples" / "spark_batch_job.py").read_text()
    spark = sections(README.read_text())["From Spark"]
    assert example in code_blocks(spark, ("python",)), (
        "README's From Spark section must quote examples/spark_batch_job.py verbatim")


# -- Spark 3.5 with the Iceberg runtime: the README's section and docs/engines.md ---------------


@pytest.fixture
def sqlite_server_url(tmp_path: Path) -> Iterator[str]:
    """A server on SQLite alone: what Spark does is the same on both backends."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'metaservice.db'}", tmp_path / "server.log",
                           env={"METASERVICE_WAREHOUSE": str(tmp_path / "warehouse")})
    server.start()
    yield server.url
    server.kill()


def spark35_rig() -> Path:
    """`.venv-spark35/bin/python`, as engines/spark35/install.sh leaves it (skip or fail
    without it, as the catalog's Spark tests do)."""
    from tests.engines.spark35.rig import JARS, PYTHON, unavailable

    for path in (PYTHON, *JARS):
        if not path.exists():
            unavailable(f"{path} is missing")
    return PYTHON


def test_the_readme_quotes_the_spark35_example_verbatim() -> None:
    example = (ROOT / "examples" / "spark35_sql_job.py").read_text()
    assert example in code_blocks(sections(README.read_text())[SPARK35_SECTION], ("python",))


@pytest.mark.spark_jvm
def test_the_spark35_section_runs_as_written(sqlite_server_url: str) -> None:
    """The install command (which does nothing when the client is there) and the job, against
    the server that `METASERVICE_URL` names, as the README's From Spark section exported it;
    twice, as a user repeats it: the second run prints the same."""
    spark35_rig()
    [block] = code_blocks(sections(README.read_text())[SPARK35_SECTION], ("bash",))
    shown = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    assert len(shown) == 3
    for run in ("first", "second"):
        done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + block], cwd=ROOT,
                              env={**user_environment(), "METASERVICE_URL": sqlite_server_url},
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (
            f"{run} run\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-5000:]}")
        for line in shown:
            assert any(out.startswith(line) for out in done.stdout.splitlines()), (
                f"the README shows {line!r}; the {run} run printed:\n{done.stdout}")


def properties(block: str, url: str) -> dict[str, str]:
    """A ``properties`` block's settings, with the README's address replaced by the server's."""
    result = {}
    for line in block.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split(None, 1)
            result[key] = value.strip().replace(README_URL, url)
    return result


@pytest.mark.spark_jvm
def test_the_engines_page_runs_as_one_script(sqlite_server_url: str, tmp_path: Path) -> None:
    """docs/engines.md's Python blocks as written, in order, in one `.venv-spark35/bin/python`
    with nothing but `METASERVICE_URL` set (the page's default is the README's server); after
    them, the session holds every setting the page's properties blocks show (the README's From
    Spark properties are the same catalogs)."""
    python = spark35_rig()
    server_url = sqlite_server_url
    text = ENGINES.read_text()
    assert "host:8000" not in text, "an address no one can run"
    config: dict[str, str] = {}
    for block in code_blocks(text, ("properties",)):
        config.update(properties(block, server_url))
    readme = properties(code_blocks(sections(README.read_text())["From Spark"],
                                    ("properties",))[0], server_url)
    assert readme.items() <= config.items(), "the README's catalogs are the page's"
    script = "\n".join(code_blocks(text, ("python",)))
    check = ("\nimport json\n"
             f"print('@@settings', json.dumps({{k: spark.conf.get(k, None) "
             f"for k in {sorted(config)!r}}}))\n")
    done = subprocess.run([str(python), "-c", script + check], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900,
                          env={**user_environment(), "SPARK_LOCAL_IP": "127.0.0.1",
                               "METASERVICE_URL": server_url})
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-5000:]}"
    # the read sessions' joins: two orders, counted 2, at the job's barrier
    assert done.stdout.count("|     2|      2|") == 2, done.stdout
    [settings] = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines()
                  if line.startswith("@@settings ")]
    assert settings == config, "the page's properties are what its script sets"


# -- the fast subset ---------------------------------------------------------------------------


@pytest.mark.slow  # collects the whole suite in a pytest process
def test_the_fast_subset_command_leaves_out_what_the_readme_says() -> None:
    """The Contributing section's command, collecting only: the pure tests and the HTTP tests on
    SQLite are in; PostgreSQL, the fuzzer, Spark, Spark 3.5, the browser and server processes
    are out."""
    [block] = code_blocks(sections(README.read_text())[CONTRIBUTING_SECTION], ("bash",))
    [command] = [line for line in block.splitlines() if line.strip()]
    python, *arguments = shlex.split(command)
    assert python == ".venv/bin/python" and arguments[:2] == ["-m", "pytest"]
    # pytest-xdist's workers (-n N) collect in their own processes and print no test ids
    if "-n" in arguments:
        at = arguments.index("-n")
        del arguments[at:at + 2]
    done = subprocess.run([sys.executable, *arguments, "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, env=user_environment(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    selected = [line for line in done.stdout.splitlines() if "::" in line]
    modules = {line.split("::", 1)[0] for line in selected}
    for pure in ("tests/metaservice/core/test_graph.py",
                 "tests/metaservice/core/test_delay_formulas.py",
                 "tests/metaservice/core/test_protocol.py",
                 "tests/metaservice/core/test_cuts.py"):
        assert pure in modules, pure
    jobs = [line for line in selected if line.startswith("tests/metaservice/jobs/test_jobs.py::")]
    assert any("[sqlite" in line for line in jobs)
    assert not any("[postgresql" in line for line in jobs)  # PostgreSQL runs are slow
    for slow in ("tests/spark_plugin/test_pipeline.py",  # Spark
                 "tests/metaservice/catalog/test_spark.py",  # Spark 3.5
                 "tests/metaservice/ui/test_dashboard_browser.py",  # the browser
                 "tests/metaservice/test_durability.py",  # server processes
                 "tests/metaservice/test_replicas.py",
                 "tests/metaservice/test_api_fuzz.py",  # a minute of generated requests
                 "tests/metaservice/protocol/test_machine.py"):  # long randomized histories
        assert slow not in modules, slow


def test_the_fast_subset_command_says_what_it_needs() -> None:
    """Its command needs pytest-xdist (``-n``), which only the dev extra installs: the section
    says so, and the dev extra has it."""
    section = sections(README.read_text())[CONTRIBUTING_SECTION]
    [block] = code_blocks(section, ("bash",))
    assert " -n " in block
    assert "pip install -e '.[dev]'" in section.split("```", 1)[0]
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["dev"]
    assert any(requirement.startswith("pytest-xdist") for requirement in dev)


def test_the_readme_counts_no_tests() -> None:
    """Counts of tests go stale with every new test: the README gives none."""
    counts = re.findall(r"\b\d[\d,]* (?:tests|passed|failed|skipped)\b", README.read_text())
    assert counts == []


# -- coverage -------------------------------------------------------------------------------

# Where each README section's code blocks run (the set-up commands: .ci/run runs the test
# command, tests/spark_plugin/test_demo.py the console script `metaservice-demo` that the first
# one ends with).
RUN_BY = {
    "": "test_ci_runs_the_readme.py, tests/spark_plugin/test_demo.py",
    **dict.fromkeys(WALKTHROUGH_SECTIONS, "test_the_readme_in_order_on_one_server"),
    "From Spark": "tests/spark_plugin/test_examples.py, test_the_engines_page_runs_as_one_script",
    CATALOG_SECTION: "test_the_readme_in_order_on_one_server",
    SPARK35_SECTION: "test_the_spark35_section_runs_as_written, "
                     "tests/metaservice/catalog/test_spark_sql_cli.py",
    "Lineage in Marquez (OpenLineage)": "tests/metaservice/lineage/test_readme_lineage.py",
    "The lake on object storage":
        "tests/metaservice/catalog/test_s3.py::test_the_readme_section_runs_as_written",
    CONTRIBUTING_SECTION: "test_the_fast_subset_command_leaves_out_what_the_readme_says",
}


def test_every_code_block_is_run() -> None:
    text = README.read_text()
    with_code = {"" if title == "" else title
                 for title, body in [("", text.split("\n## ", 1)[0]), *sections(text).items()]
                 if code_blocks(body, ("bash", "sh", "python", "sql", "properties"))}
    assert with_code == set(RUN_BY), "a README section's code blocks run in no test"
