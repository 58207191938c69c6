"""Public test helpers a user's own tests may use: the TrainGate stand-in, an OpenAI-compatible
endpoint stand-in (``openai_standin``), and servers on threads.

Never shipped to Lambda.
"""
