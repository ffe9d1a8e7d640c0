"""The tier's forwarder: an instance that does not answer, however its connection fails, is marked
down and the next candidate is asked; when none answers, the error names the partitions tried."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from deltastate.service.tier.forward import Ask, Forwarder, InstanceUnavailableError

OWNER, STANDBY = "http://owner:1", "http://standby:2"
ASK = Ask("GET", b"/stores/player_stats/rank", b"player_id=p1", [(b"accept", b"application/json")])


def _forwarder(fail_owner_with: Exception | None, fail_standby_with: Exception | None = None) -> Forwarder:
    def answer(request: httpx.Request) -> httpx.Response:
        failure = fail_owner_with if request.url.host == "owner" else fail_standby_with
        if failure is not None:
            raise failure
        return httpx.Response(200, json={"served": request.url.host, "query": request.url.query.decode()})

    forwarder = Forwarder("http://here:3", timeout_s=1.0, down_for_s=30.0)
    forwarder._client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return forwarder


@pytest.mark.parametrize("failure", [
    httpx.ConnectError("refused"),
    httpx.ReadError("reset"),
    # anyio asking a transport its dying peer closed as it opened for the socket's address
    AttributeError("'NoneType' object has no attribute 'getpeername'"),
])
def test_an_owner_that_does_not_answer_is_marked_down_and_a_standby_answers(failure: Exception) -> None:
    forwarder = _forwarder(failure)
    part = asyncio.run(forwarder.ask("player_stats", [0], [OWNER, STANDBY], ASK))
    assert (part.status, part.served_by, part.standby) == (200, STANDBY, True)
    assert part.body == b'{"served":"standby","query":"player_id=p1"}'
    assert forwarder._order([OWNER, STANDBY]) == [STANDBY, OWNER]  # the owner is tried last while down


def test_no_instance_answering_names_the_partitions_and_the_instances_tried() -> None:
    forwarder = _forwarder(httpx.ConnectError("refused"), AttributeError("'NoneType' object has no attribute 'getpeername'"))
    with pytest.raises(InstanceUnavailableError, match=r"partition\(s\) 0, 2; tried http://owner:1, http://standby:2"):
        asyncio.run(forwarder.ask("player_stats", [0, 2], [OWNER, STANDBY], ASK))
