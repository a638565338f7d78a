"""The records of a run: typed models of every file a run directory holds, one writer
and one reader for each.

    RUN_DIR/
      metadata.json          what the run is: grid, scoring settings, sessions, totals
                             (``record.metadata``)
      questions.jsonl        one line per (model, temperature, question, repeat): stop
                             reason, error, score and metrics (``record.lines``)
      answers.jsonl          one line per scored answer, with everything known about it
      results.json           original AidanBench schema (first repeat), failing answer last
      results.repeat-K.json  the same for repeat K > 1
      outputs.json           the manifest: the sha256 of each results file of the latest
                             write, written before them (``record.files``)
      usage.jsonl            the usage ledger: every request sent and what answered it
                             (``record.usage``)
      checkpoints.sqlite     LangGraph checkpoints, one thread per question line
      cache.sqlite           embeddings and similarity judgements, by content hash
      report.html            the offline page ``aidanbench view`` writes
      lock                   held while a run (or ``forget``) writes here

The run engine writes through this package only (``write_lines``, ``write_metadata``,
``UsageLedger``); every command reads through it (``read_lines``, ``read_metadata``,
``read_ledger``, and ``record.results`` for the read-only ``QuestionResult`` view of a
run directory or of a results file in the original schema). Models are pydantic: the
files are the package's edge, where a damaged value is refused with one line, unknown
fields survive a rewrite and absent ones stay absent (see each module).

Only the package's own light modules and ``core`` are imported: reading a run directory
loads no graph, no client and no HTTP library.
"""
