"""The README works as written: its curl walk-through against a real `metaservice serve`, and
the Spark example it quotes is the file in `examples/` (which tests/spark_plugin/test_examples.py
runs).

The walk-through's bash blocks run in order in one bash process, each command exactly as
written; the only change is the server's address (`http://127.0.0.1:8000` becomes the test
server's) and a `curl` function that calls the real curl with `-sS` and keeps each answer's
status and body for the checks. Each answer shown in a comment under (or after) a command is
checked against the real answer:

- ``# {...}`` or ``# 409 {...}`` (continued on comment lines indented by two or more spaces) is
  JSON, except that ``$NAME`` stands for the shell variable's value at the end of the run and
  ``...`` means "and more": as an object member, other members; as a value, any value; in a
  list, other items around the ones shown (which must appear in that order); at the end of a
  string, any rest. Objects always match when they hold at least the members shown, so a field
  the server adds never breaks a check.
- ``# 204`` is a status alone.
- A command with no status shown must answer 2xx.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
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
    server = ServerProcess(database_url, tmp_path / "server.log")
    server.start()
    yield server.url
    server.kill()


def test_the_curl_walkthrough_answers_as_the_readme_shows(server_url: str,
                                                          tmp_path: Path) -> None:
    for tool in ("bash", "curl", "jq"):
        if shutil.which(tool) is None:
            pytest.fail(f"the README's walk-through needs {tool} (install it)")
    steps = walkthrough(README.read_text())
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
        if expected_status is None:
            assert 200 <= answer.status < 300, where
        else:
            assert answer.status == expected_status, where
        if pattern is not None:
            assert matches(pattern, json.loads(answer.body)), (
                f"{where}\nthe README shows: {step.answer}")


# -- the Spark example ---------------------------------------------------------------------


def test_the_readme_quotes_the_spark_example_verbatim() -> None:
    example = (ROOT / "examples" / "spark_batch_job.py").read_text()
    spark = sections(README.read_text())["From Spark"]
    assert example in code_blocks(spark, ("python",)), (
        "README's From Spark section must quote examples/spark_batch_job.py verbatim")
