"""Seed fidelity (issue #14): every example of the reference documents in
``/work/shared/seeds/`` that maps onto jpfs, fed with the seed's own input and checked
against the seed's stated outcome. ``protocol/seeds.md`` maps each example to its test
and lists the deliberate differences."""
