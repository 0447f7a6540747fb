"""CuTe DSL's door: every call of a kernel compiled by `cute.compile`,
recorded in logged passes (seam.py, door.py; docs/kernels.md)."""
