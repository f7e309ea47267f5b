"""Test plugin: a `nkicc_cache_backend` implementation written before the
hook took `remote` (a local backend only). It records what it was asked and
answers None, so the local tier stays nkicc's disk cache."""
from nkicc.pass_api import hookimpl

ASKED: list = []


@hookimpl
def nkicc_cache_backend(directory, size_limit):
    ASKED.append(directory)
    return None
