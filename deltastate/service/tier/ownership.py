"""Who answers for a partition: pure functions of the group's assignment.

Kafka's group protocol assigns each (topic, partition) to one member; members are named by their
client.id, the instance's advertised URL. Several members with one URL (the worker processes of one
instance) are one instance. The active owner of a partition is the instance it is assigned to; its
standbys are the next instances in sorted URL order, so every instance computes the same standbys
from the same assignment without a word to the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TierView:
    """One reading of the group: the instances and the owner of every assigned partition."""

    instances: tuple[str, ...] = ()  # sorted advertised URLs
    owners: Mapping[TopicPartition, str] = field(default_factory=dict)
    standby_count: int = 1

    def owner(self, topic: str, partition: int) -> str | None:
        """The active instance of the partition; None while no instance has it (before the first
        assignment, or a topic no instance subscribes to)."""
        return self.owners.get((topic, partition))

    def standbys(self, topic: str, partition: int) -> list[str]:
        """The instances after the owner in sorted order, as many as configured and available."""
        owner = self.owner(topic, partition)
        if owner is None or owner not in self.instances:
            return []
        at = self.instances.index(owner)
        count = min(self.standby_count, len(self.instances) - 1)
        return [self.instances[(at + i) % len(self.instances)] for i in range(1, count + 1)]

    def partitions_of(self, instance: str, topic: str) -> list[int]:
        return sorted(p for (t, p), url in self.owners.items() if t == topic and url == instance)


def view_of(assignment: Iterable[tuple[str, Iterable[TopicPartition]]], standby_count: int = 1) -> TierView:
    """The view of (client id, assigned partitions) pairs, one pair per group member. A member with
    no partitions is still an instance: it answers as a standby and forwards."""
    owners: dict[TopicPartition, str] = {}
    instances: set[str] = set()
    for client_id, partitions in assignment:
        url = client_id.rstrip("/")
        instances.add(url)
        for topic, partition in partitions:
            owners[(topic, int(partition))] = url
    return TierView(tuple(sorted(instances)), owners, standby_count)


def plan(view: TierView, topic: str, partitions: int, here: str) -> dict[str, list[int]]:
    """Instance -> the partitions of `topic` it answers in a scattered read; a partition nobody owns
    yet is answered here (every instance reads the shared snapshots)."""
    groups: dict[str, list[int]] = {}
    for p in range(partitions):
        groups.setdefault(view.owner(topic, p) or here, []).append(p)
    return groups


__all__ = ["TierView", "TopicPartition", "plan", "view_of"]
