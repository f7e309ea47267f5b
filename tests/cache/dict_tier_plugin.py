"""Test plugin: a shared cache tier for dict:// URLs (an in-memory table
standing in for another kind of server), through the same
`nkicc_cache_backend` hook as nkicc's Redis tier."""
from nkicc.pass_api import hookimpl

TABLE: dict[str, bytes] = {}


class DictBackend:
    def get(self, name):
        return TABLE.get(name)

    def set_many(self, items):
        TABLE.update(items)

    def usage(self, prefix):
        mine = [v for k, v in TABLE.items() if k.startswith(prefix)]
        return len(mine), sum(map(len, mine))


@hookimpl
def nkicc_cache_backend(remote):
    if remote is None or not remote.startswith("dict://"):
        return None
    return DictBackend()
