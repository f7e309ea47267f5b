"""`import nki_cpu_simulator`, the vendor's CPU simulator that the NKI Library's
test suite imports in its simulation mode (`--test-mode simulation`), served by
nkicc. It sits on the alias path, which comes last on sys.path, so an installed
vendor simulator is always found first and never shadowed."""
