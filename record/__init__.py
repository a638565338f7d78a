"""The records of a run: typed models of every file a run directory holds, one writer
(``record.recorder``) and one reader for each. The directory's layout is in
``docs/results.md``, each module's part in ``ARCHITECTURE.md``.

Models are pydantic: the files are the package's edge, where a damaged value is refused with
one line, unknown fields survive a rewrite and absent ones stay absent (see each module).
Only the package's own light modules and ``core`` are imported: reading a run directory
loads no graph, no client and no HTTP library.
"""
