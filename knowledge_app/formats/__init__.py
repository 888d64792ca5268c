"""Each format read as a stream of blocks (`chunker.Block`: heading, paragraph, code, table row)
under their heading paths: one module per format, the shared reading helpers in `common`.
Nothing here needs Django: it runs in the parser child, under its limits."""
