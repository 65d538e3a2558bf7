"""The pure topology graph: cycles, components, traversal."""

from __future__ import annotations

from metaservice.core.graph import JobEdges, Topology


def job(name: str, sources: list[str], sinks: list[str]) -> JobEdges:
    return JobEdges(name, frozenset(sources), frozenset(sinks))


def chain(n: int) -> list[JobEdges]:
    return [job(f"j{i}", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]


def test_deep_chain_has_no_cycle_and_closing_it_reports_the_whole_path() -> None:
    topology = Topology(chain(500))
    assert topology.find_cycle() is None
    cycle = topology.with_job(job("back", ["t500"], ["t0"])).find_cycle()
    assert cycle is not None
    assert cycle[0] == cycle[-1]
    assert "back" in cycle
    assert len(cycle) == 2 * 501 + 1  # 501 tables + 501 jobs, first table repeated


def test_diamond_is_not_a_cycle_but_a_back_edge_is() -> None:
    diamond = [job("left", ["a"], ["b"]), job("right", ["a"], ["c"]),
               job("join", ["b", "c"], ["d"])]
    assert Topology(diamond).find_cycle() is None
    cycle = Topology([*diamond, job("loop", ["d"], ["a"])]).find_cycle()
    assert cycle is not None
    assert cycle[0] == cycle[-1] and "loop" in cycle and "join" in cycle


def test_a_job_reading_and_writing_one_table_is_a_cycle() -> None:
    assert Topology([job("self", ["x"], ["x"])]).find_cycle() == ["x", "self", "x"]


def test_components_connect_in_either_direction() -> None:
    topology = Topology([job("a", ["t1"], ["t2"]), job("b", ["t3"], ["t2"]),
                         job("c", ["t4"], ["t5"])])
    assert topology.component("t1") == {"t1", "t2", "t3"}
    assert topology.component("t5") == {"t4", "t5"}
    assert topology.component("unrelated") == {"unrelated"}


def test_upstream_and_downstream_respect_depth() -> None:
    topology = Topology(chain(5))
    assert topology.upstream("t5").tables == {f"t{i}": 5 - i for i in range(6)}
    assert topology.upstream("t5", depth=2).tables == {"t5": 0, "t4": 1, "t3": 2}
    assert topology.downstream("t0", depth=1).tables == {"t0": 0, "t1": 1}
    assert topology.downstream("t0", depth=1).jobs == {"j0"}
