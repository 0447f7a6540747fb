"""The one rendering layer: what the commands print or write, from the data
analysis/ returns. One module per format, as pyinstrument's renderers/:

- text/: what people read, one module per command (analyze, tail, diff,
  cost, gemm, tune, replay);
- jsonout.py: every command's --json document, and repro's bundle;
- csvout.py: the one place that writes CSV (--csv, --timeline, replay's
  results);
- html.py: the report's page.

render/ may import analysis/, records/ and replay/, never cli/ or recording/;
analysis/ never imports render/ (tests/test_layout.py).
"""
