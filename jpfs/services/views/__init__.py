"""Views of the record that change nothing: ``jpfs tree``/``top`` (:mod:`.status_view`),
``grep`` (:mod:`.search`), ``log`` (:mod:`.history`), ``cost`` (:mod:`.costs`) and
``doctor`` (:mod:`.doctor`)."""
