"""The rollout engine: the record's state machine, init, the worker, recovery, the TrainGate client
and the vault that seals callback keys. It runs the same on Lambda and on the local server; every
I/O it does goes through the ports in :mod:`rollout_sdk.store` and :mod:`rollout_sdk.dispatch`."""
