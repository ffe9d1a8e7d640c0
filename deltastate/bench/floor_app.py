"""The bare-stack floor of the query bench: a minimal FastAPI app answering the same route from a
Python dict, run under the same server (uvicorn) with the same worker count. What deltastate serve
adds on top of its web stack is its distance from this floor."""

from __future__ import annotations

import os

from fastapi import FastAPI, HTTPException

KEYS = int(os.environ.get("DELTASTATE_FLOOR_KEYS", "100000"))
VALUES = {f"player-{i:09d}": {"games": i % 50, "total_score": i % 100_000, "best_score": i % 10_000,
                              "last_played": 1_700_000_000_000 + i} for i in range(KEYS)}
app = FastAPI()


@app.get("/stores/player_stats/keys/{key}")
def get_key(key: str) -> dict:
    value = VALUES.get(key)
    if value is None:
        raise HTTPException(404)
    return {"store": "player_stats", "key": key, "value": value}
