"""Authentication and authorisation: bearer tokens with roles
(docs/contract.md#tokens-and-roles)."""
