"""Geography and peers: where each lender takes applications and makes loans against comparable
lenders in the same markets (the redlining screen), and each lender's denial disparities against
the same peers (docs/fair-lending.md, "Geography and peers")."""
