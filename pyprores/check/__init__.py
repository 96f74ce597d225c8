"""Checking a decode against the reference: per-frame comparison (compare), deviation statistics
(metrics), the text and JSON reports (report) and the deviation map (devmap)."""
