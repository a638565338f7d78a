"""Reading, rescoring, summarising and plotting AidanBench results, with no API calls."""
