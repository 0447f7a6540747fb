"""CUDA graph keys, as the records' "graph" and the summary's "graphs" hold
them (docs/FORMAT.md): family * GRAPH_FAMILY + size. Family 0 is the decode
graphs of the default variant, so a decode graph's key is its batch size;
the servers' graph integrations number the others (integrations/graphs.py)."""
GRAPH_FAMILY = 1_000_000
