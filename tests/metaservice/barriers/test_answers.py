"""The hot routes' answers are built by hand, beside the models the OpenAPI document declares
for them (``next``'s and ``start``'s ``position_answer``, a commit's and a root report's
``_completed_answer``), to serialise each answer once: these twins stay for speed, and this test
proves them equal over generated values: every answer is its model's, field for field, with
no field the model lacks and no value the model would change."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from metaservice.barriers.endpoints import _completed_answer
from metaservice.barriers.schemas import CompletedOut, PositionOut, position_answer
from metaservice.barriers.service import Completed
from metaservice.core.positions import Position

INT64 = st.integers(min_value=0, max_value=2**63 - 1)
SNAPSHOTS = st.dictionaries(st.text(min_size=1, max_size=20), INT64, max_size=4)

POSITIONS = st.builds(
    Position,
    action=st.sampled_from(["process", "wait", "abort", "none"]),
    barrier=st.none() | INT64,
    snapshots=SNAPSHOTS,
    previous=st.none() | SNAPSHOTS,
    retry_after_ms=st.none() | INT64,
    reason=st.none() | st.text(max_size=40),
    restart_after=st.none() | INT64,
)


def _as_model_sends_it(answer: dict[str, Any], model: type[PositionOut] | type[CompletedOut]
                       ) -> dict[str, Any]:
    return model.model_validate(answer).model_dump(mode="json", exclude_unset=True)


@given(POSITIONS)
def test_a_position_answer_is_the_declared_models(position: Position) -> None:
    answer = orjson.loads(orjson.dumps(position_answer(position)))
    assert answer == _as_model_sends_it(answer, PositionOut)
    assert answer["action"] == position.action
    if position.action == "process":  # null previous: a full step (docs/contract.md#start)
        assert "previous" in answer and answer["previous"] == position.previous


@given(st.text(max_size=60), INT64, INT64)
def test_a_completed_answer_is_the_declared_models(table: str, barrier: int,
                                                   snapshot_id: int) -> None:
    answer = orjson.loads(_completed_answer(Completed(table, barrier, snapshot_id)).body)
    assert answer == CompletedOut(table=table, barrier=barrier,
                                  snapshot_id=snapshot_id).model_dump(mode="json")
