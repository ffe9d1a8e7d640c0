"""Where a new checkpoint starts when a store is restored instead of replayed from the beginning."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ResumePlan:
    """starting_offsets: Kafka partition -> next offset to read (the offsets the changelog and the
    intake audit record as processed, plus one).
    seed_path: a Delta table holding the store's latest state (changelog.reader.state_columns) that
    seeds the new checkpoint's state; None when the engine reads its state from the changelog
    itself (window and session stores)."""

    starting_offsets: dict[int, int] = field(default_factory=dict)
    seed_path: str | None = None

    def kafka_starting_offsets(self, topic: str) -> str:
        """The JSON Spark's Kafka source takes for startingOffsets."""
        import json

        return json.dumps({topic: {str(p): int(o) for p, o in sorted(self.starting_offsets.items())}})
