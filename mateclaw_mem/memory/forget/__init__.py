"""Forget that forgets (issue 17, point 4; issue 35, point 5): `service` (ForgetService), `matching`
(how a claim is recognised and cut), `tombstones` (forget.db), `guard` (what extraction and dreaming
consult), `holder` (the shape of a store that holds words; the registry is runtime/holders.py),
`places` (the stores reached through the service's own parts), `rows` (table rules), `scrub` (the
old bytes out of a database file), `scan` (the byte-level proof), `receipt` (what a forget answers)."""
