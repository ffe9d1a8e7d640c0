"""Where a new checkpoint starts when a store is restored instead of replayed from the beginning.

deltastate restore writes the plan beside the new checkpoint (resume.json): every run of that
checkpoint's lineage must build the same streaming plan (the seed source stays part of it), and
Kafka's starting offsets only matter for the run that creates the query checkpoints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from deltastate.engine.common.checkpoint_check import any_query_started
from deltastate.engine.common.lineage import Lineage
from deltastate.errors import CheckpointMismatchError

RESUME_FILE = "resume.json"
EARLIEST = -2  # Spark's Kafka source: -2 in a startingOffsets JSON means the earliest offset


@dataclass(frozen=True)
class ResumePlan:
    """starting_offsets: Kafka partition -> next offset to read (one past what the intake audit
    records as processed; a batch is done once its audit row landed).
    seed_path: a Delta table holding the store's latest state (changelog.reader.state_columns) that
    seeds the new checkpoint's state; None when the engine reads its state from the changelog
    itself (window and session stores)."""

    starting_offsets: dict[int, int] = field(default_factory=dict)
    seed_path: str | None = None

    def kafka_starting_offsets(self, topic: str, partitions: int | None = None) -> str:
        """The JSON Spark's Kafka source takes for startingOffsets."""
        return offsets_json(topic, self.starting_offsets, partitions)

    def to_json(self) -> str:
        return json.dumps({"starting_offsets": {str(p): o for p, o in sorted(self.starting_offsets.items())},
                           "seed_path": self.seed_path})

    @classmethod
    def from_json(cls, text: str) -> ResumePlan:
        data = json.loads(text)
        return cls({int(p): int(o) for p, o in data["starting_offsets"].items()}, data.get("seed_path"))


def offsets_json(topic: str, offsets: dict[int, int], partitions: int | None = None) -> str:
    """Spark wants every partition of the topic named; a partition the plan does not know (nothing
    of it was ever recorded) starts at the earliest offset."""
    full = {p: EARLIEST for p in range(partitions or 0)}
    full.update(offsets)
    return json.dumps({topic: {str(p): int(o) for p, o in sorted(full.items())}})


def save_plan(checkpoint: str, plan: ResumePlan) -> None:
    path = Path(checkpoint) / RESUME_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(plan.to_json())
    tmp.replace(path)


def load_plan(checkpoint: str) -> ResumePlan | None:
    path = Path(checkpoint) / RESUME_FILE
    return ResumePlan.from_json(path.read_text()) if path.is_file() else None


def resume_plan_for(lineage: Lineage, given: ResumePlan | None) -> ResumePlan | None:
    """The checkpoint's saved plan wins (its query was built from it); a plan given for a checkpoint
    whose query has not started yet is saved, so that later runs rebuild the same plan."""
    saved = load_plan(lineage.checkpoint)
    if saved is not None:
        if given is not None and given != saved:
            raise CheckpointMismatchError(
                f"store {lineage.store!r}: checkpoint {lineage.checkpoint} was restored with another resume "
                "plan than the one given; run without one, or `deltastate restore` again")
        return saved
    if given is not None:
        if any_query_started(lineage.checkpoint):
            raise CheckpointMismatchError(
                f"store {lineage.store!r}: checkpoint {lineage.checkpoint} already started without a resume "
                f"plan; a plan applies only to a new checkpoint (`deltastate restore {lineage.store}`)")
        save_plan(lineage.checkpoint, given)
    return given
