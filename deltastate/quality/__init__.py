"""Data quality: great-expectations suites (kept in schemas/quality/) and the gate that lets a
snapshot become current only when its checks pass."""
