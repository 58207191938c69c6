"""Public test helpers a user's own tests may use: the TrainGate stand-in and servers on threads.

Never shipped to Lambda.
"""
