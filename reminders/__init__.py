"""Reminders (DESIGN §1.4, §12): when they fire (:mod:`reminders.when`), firing them once (:mod:`reminders.firing`)."""
