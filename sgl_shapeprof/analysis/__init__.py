"""Analyses of scanned records: analyze, diff, gemm, tunableop, cost, report.
Functions of typed parameters that return data or text and raise typed
errors; the command line (sgl_shapeprof.cli) prints and exits."""
