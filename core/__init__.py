"""The bottom layer: what every other package speaks in.

State and its records, settings and thresholds, the names of stop reasons, error kinds and
scorers, and the exceptions that mark a failure of the outside world. It imports no other
aidanbench package, so any layer can import it without a graph, a client or an HTTP library
(``tests/test_layers.py`` enforces the direction).
"""
