"""The query tier: several `deltastate serve` instances sharing each store's partitions, as Kafka
Streams' interactive queries do, without the user writing the RPC layer.

options.py (the tier's settings), ownership.py (an assignment -> owner and standbys per partition),
membership.py (Kafka's consumer-group protocol decides the assignment; every instance reads the
whole of it), scope.py (the headers instances speak to each other), merge.py (parts of a scattered
read -> one answer), forward.py (one hop to another instance, owner then standby), router.py (the
ASGI layer that decides, per request, to answer here, forward or scatter).
"""
