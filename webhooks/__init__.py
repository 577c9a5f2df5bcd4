"""gpuctrl's mutating admission webhook."""
