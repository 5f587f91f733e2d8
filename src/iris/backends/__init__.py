"""Backends: the pools of compute the controller places tasks on, one package per kind.

`protocol` is the contract, `registry` builds a backend from its config, `staging` puts a job's
files on the host that runs it. See docs/backends.md for adding a kind.
"""
