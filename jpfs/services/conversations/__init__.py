"""A conversation's files and state: creating and removing (:mod:`.lifecycle`), mail
(:mod:`.mail`), onboarding (:mod:`.onboarding`), a caller's input (:mod:`.inputs`), status
reports (:mod:`.reports`), budgets (:mod:`.budgets`) and this process's runs (:mod:`.runs`)."""
