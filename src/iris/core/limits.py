"""Decides the most one job may ask for: cores, bytes and devices per task, replicas, retries, timeouts.

The SDK refuses a request past these before sending it, so a person gets the flag's own words and a
usage error, and the controller checks the same numbers again on receipt, since any client may
call the API. Each bound is far above any real job and far below what would make a sum, a product
or a timestamp overflow in the scheduler or in SQLite's 64-bit integers. The module imports nothing,
so the submit path pays nothing for it.
"""

MAX_TASK_CPU = 100_000.0
MAX_TASK_BYTES = 2**50  # 1 PiB of memory or disk
MAX_TASK_DEVICES = 65_536
MAX_REPLICAS = 100_000
MAX_RETRIES = 1000
MAX_TIMEOUT_S = 10 * 365 * 86400.0  # 10 years, for the run and for the wait to be placed
