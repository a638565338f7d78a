"""Benchmarks of aidanbench itself (speed, checkpoint size, memory); not shipped."""
