"""DeepEP's door: its Buffer's dispatch and combine recorded when called in
a logged pass (seam.py, door.py; docs/kernels.md)."""
