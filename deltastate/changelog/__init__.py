"""The Delta changelog of record: layout, exactly-once appends, latest-per-key reads."""
