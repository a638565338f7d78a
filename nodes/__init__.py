"""The nodes of the per-question graph, one module each, with their pure helpers
(prompt rendering, tag parsing, cosine novelty, metrics, routing)."""
