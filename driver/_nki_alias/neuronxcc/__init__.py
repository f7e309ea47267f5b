"""`import neuronxcc.nki...`, the package path of NKI 0.1 inside the Neuron
compiler 2.x, served by nkicc's NKI 0.1 front end (only on the alias path, so
a real neuronxcc is never shadowed): see neuronxcc/nki/__init__.py."""
