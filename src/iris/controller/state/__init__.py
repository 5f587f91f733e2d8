"""The state core: load a snapshot, decide (the pure scheduler and `transitions`), apply (the
applier's guarded updates), act (start and stop attempts). The control tick is the one thread that
changes what runs where; nothing here speaks HTTP.
"""
