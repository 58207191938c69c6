"""The rollout engine: init, the worker, delivery, settlement, recovery, the final responses and
the cost figures written into them. It runs the same on Lambda and on the local server; every
I/O it does goes through the ports below it: the record store (:mod:`rollout_sdk.store`, which
holds the record's state machine), the dispatchers (:mod:`rollout_sdk.dispatch`), the TrainGate
client (:mod:`rollout_sdk.traingate`) and the vault (:mod:`rollout_sdk.vault`)."""
