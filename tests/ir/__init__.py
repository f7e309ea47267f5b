"""Tests of nkicc.ir: loop dependences and the instruction table."""
