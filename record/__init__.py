"""The records of a run: typed models of every file a run directory holds, one writer
and one reader for each (the directory's layout is in ``docs/results.md``).

``record.metadata`` is ``metadata.json``; ``record.lines`` the question and answer lines and
the results files in the original schema; ``record.files`` the names, the lock and the
``outputs.json`` manifest; ``record.usage`` the ``usage.jsonl`` ledger; ``record.recorder``
the one writer; ``record.results`` the read-only ``QuestionResult`` view of a run directory
or of an original-schema results file.

Models are pydantic: the files are the package's edge, where a damaged value is refused with
one line, unknown fields survive a rewrite and absent ones stay absent (see each module).
Only the package's own light modules and ``core`` are imported: reading a run directory
loads no graph, no client and no HTTP library.
"""
