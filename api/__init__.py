"""gpuctrl's API types: pydantic v2 models, the single source of truth for the CRDs."""
