"""Tests of nkicc.isa (language/isa/): enumerations and engine constants."""
