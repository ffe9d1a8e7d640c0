"""The stream engine: one streaming query per store, writing its changelog exactly once.

  common/    the run loop (once / continuous), checkpoint checks and the writer lock, lineage and
             resume, the per-batch report and the audit and dead-letter rows every store writes
  keyvalue/  the key-value plan: a fold over Spark's state store, its batch writer and audit ledger
  windowed/  window and session stores: state read from the changelog, stream time per partition,
             window and session changes per micro-batch
"""

from deltastate.engine.common.report import BatchListener, BatchReport, RunResult
from deltastate.engine.run import run_store

__all__ = ["BatchListener", "BatchReport", "RunResult", "run_store"]
