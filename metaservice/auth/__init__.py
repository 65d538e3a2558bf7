"""Authentication and authorisation: bearer tokens with roles (SPEC §9)."""
