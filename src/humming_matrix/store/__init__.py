"""Records and the store: the record models, atomic writes, lookup."""
