"""Holds the `nki` alias package. Its folder goes on sys.path (at the end, and
only when no real `nki` is installed) so NKI scripts run unchanged."""
