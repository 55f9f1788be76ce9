"""The matrix: cells, pairings, install records, package indexes, requirements, preflight."""
