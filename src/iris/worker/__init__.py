"""The worker daemon (`iris worker start`): turns a host into capacity for a `workers` backend.

It dials the controller and never listens: it registers, long-polls for attempts to start and
stop, and reports exits and log bytes. It imports nothing of the controller.
"""
