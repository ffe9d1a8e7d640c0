"""Membership of the query tier through Kafka's consumer-group protocol, not a consensus of our own.

Each instance runs one member consumer in the tier's group, subscribed to the source topics of the
stores, with its advertised URL as client.id. Kafka assigns every partition to one live member (the
active owner) and moves a dead member's partitions to the others once its session times out. The
member never reads records: its partitions are paused as soon as they are assigned, so it costs a
heartbeat, not a fetch. The whole assignment, every member's and not only this one's, is read back
with the admin API's describe_consumer_groups on every rebalance this member sees and every
refresh_s, so every instance routes from the same view.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from deltastate.service.tier.options import TierOptions
from deltastate.service.tier.ownership import TierView, view_of

log = logging.getLogger(__name__)


class Membership:
    """The member consumer and the view of the group, refreshed on a background thread."""

    def __init__(self, bootstrap: str, options: TierOptions, topics: Callable[[], list[str]]) -> None:
        self.bootstrap = bootstrap
        self.options = options
        self._topics = topics  # resolved at start: a store's topic is read from its checkpoint
        self._view = TierView(standby_count=options.standbys)
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None
        self.subscribed: list[str] = []

    @property
    def here(self) -> str:
        return self.options.url

    @property
    def view(self) -> TierView:
        return self._view

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tier-membership", daemon=True)
        self._thread.start()

    def _consumer(self):
        from confluent_kafka import Consumer

        session_ms = int(self.options.session_timeout_s * 1000)
        return Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.options.group, "client.id": self.options.url,
            "session.timeout.ms": session_ms, "heartbeat.interval.ms": max(100, session_ms // 6),
            # Cooperative: a member leaving moves only its partitions; the others keep theirs.
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False, "auto.offset.reset": "latest", "log_level": 3})

    def _run(self) -> None:
        from confluent_kafka.admin import AdminClient

        consumer = None
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        next_refresh = 0.0
        while not self._stop.is_set():
            try:
                if consumer is None:
                    self.subscribed = sorted(set(self._topics()))
                    consumer = self._consumer()
                    consumer.subscribe(self.subscribed, on_assign=self._rebalanced, on_revoke=self._rebalanced,
                                       on_lost=self._rebalanced)
                consumer.poll(0.1)
                assigned = consumer.assignment()
                if assigned:
                    consumer.pause(assigned)  # a member routes reads; it never fetches records
                if self._changed.is_set() or time.monotonic() >= next_refresh:
                    self._changed.clear()
                    self._refresh(admin)
                    next_refresh = time.monotonic() + self.options.refresh_s
            except Exception as exc:  # noqa: BLE001 - the broker may be away; keep the last view
                log.warning("query tier group %s: %s", self.options.group, exc)
                self._stop.wait(1.0)
        if consumer is not None:
            consumer.close()  # leaves the group at once: the others take over without a timeout

    def _rebalanced(self, _consumer, _partitions) -> None:
        self._changed.set()

    def _refresh(self, admin) -> None:
        from confluent_kafka import ConsumerGroupState

        future = admin.describe_consumer_groups([self.options.group],
                                                request_timeout=self.options.forward_timeout_s * 2)[self.options.group]
        group = future.result()
        # Mid-rebalance the members' assignments are partial: keep routing by the last stable view.
        if group.state != ConsumerGroupState.STABLE:
            return
        assignment = [(m.client_id, [(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or [])])
                      for m in group.members]
        self._view = view_of(assignment, self.options.standbys)

    def wait_until(self, ready: Callable[[TierView], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready(self._view):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.options.session_timeout_s + 5)


__all__ = ["Membership"]
