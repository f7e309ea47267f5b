"""nkicc.plugins: the built-in passes, each one plugin module registered through the `nkicc` entry-point group like any third-party pass."""
