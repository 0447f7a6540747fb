"""The one rendering layer: what the commands print or write, from the data
analysis/ returns. One module per format, as pyinstrument's renderers/:

- text/: what people read, one module per command (analyze, tail, diff,
  cost, gemm, tune);
- jsonout.py: every command's --json document;
- csvout.py: the one place that writes CSV (--csv, --timeline, replay's
  results).

render/ may import analysis/ and records/, never cli/ or recording/;
analysis/ never imports render/ (tests/test_layout.py). The HTML report is
still analysis/report.py.
"""
