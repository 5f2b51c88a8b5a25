"""Helpers the tests share, imported as `support.<module>`; fixtures live in conftest.py. Test modules never import
one another."""
